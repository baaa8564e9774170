"""What a new user hits on the command line: every policy's options checked the same way, an
``--out`` that is a file refused before any work, no silently dropped option, fixes that work.
Each case exits 2 with the key, the bad value and the fix named (``embodied.apps.cli.main``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from embodied.apps.cli import main
from embodied.apps.evaluation import EvalConfig
from embodied.errors import CheckpointError, ConfigError
from tests.conftest import cli_exit2

ROBOT = "hardware/configs/sim_arm.yaml"


_exit2 = cli_exit2


@pytest.fixture(scope="module")
def pdp_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from policies.diffusion.training_pdp import train_pdp
    from tests.diffusion.conftest import synthetic_demonstrations, tiny_config

    out = tmp_path_factory.mktemp("pdp")
    train_pdp(synthetic_demonstrations(), out, tiny_config(z_dim=0, steps=1), progress=False,
              tensorboard=False)  # fmt: skip
    return out


EVAL = ["eval", "--env", "mujoco:reach_around", "--episodes", "1", "--workers", "0"]


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        ([*EVAL, "--policy", "expert", "--policy-arg", "speed=fast"], "speed='fast' is not a number"),
        ([*EVAL, "--policy", "expert", "--policy-arg", "bogus=1"], "unknown option(s) ['bogus']"),
        (["deploy", "--robot", ROBOT, "--policy", "sine", "--policy-arg", "bogus=1", "--dry-run"],
         "policy 'sine' got unknown option(s) ['bogus']; its options: amplitude_rad, frequency_hz"),
        (["deploy", "--robot", ROBOT, "--policy", "sine", "--policy-arg", "frequency_hz=fast",
          "--dry-run"], "frequency_hz='fast' is not a number"),
    ],
)  # fmt: skip
def test_policy_options_are_checked_alike(
    argv: list[str],
    named: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    err = _exit2(monkeypatch, capsys, *argv, "--out", str(tmp_path / "out"))
    assert named in err and "fix:" in err


def test_a_checkpoint_refuses_unknown_options(
    pdp_checkpoint: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    err = _exit2(
        monkeypatch, capsys, *EVAL, "--policy", str(pdp_checkpoint), "--policy-arg", "bogus=1"
    )
    assert "unknown option(s) ['bogus']" in err and "noise_seed" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "argv",
    [
        [*EVAL, "--policy", "expert"],
        ["collect", "--env", "mujoco:reach_around", "--episodes", "1"],
        ["train", "pdp", "--data", "nowhere", "--steps", "1"],
        ["deploy", "--robot", ROBOT, "--policy", "hold", "--dry-run"],
    ],
)
def test_an_out_that_is_a_file_is_refused_before_any_work(
    argv: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    file = tmp_path / "results"
    file.write_text("keep me")
    err = _exit2(monkeypatch, capsys, *argv, "--out", str(file))
    assert "is an existing file, not a folder" in err and "--out" in err
    assert file.read_text() == "keep me"


def test_train_steps_zero_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _exit2(monkeypatch, capsys, "train", "pdp", "--data", "nowhere", "--steps", "0",
                 "--out", str(tmp_path / "run"))  # fmt: skip
    assert "--steps 0 would write an untrained policy" in err
    assert not (tmp_path / "run").exists()


def test_videos_need_an_out_folder_and_existing_episodes() -> None:
    with pytest.raises(ConfigError, match="no out folder"):
        EvalConfig(envs="mujoco:reach_around", episodes=2, video_episodes=(0,))
    with pytest.raises(ConfigError, match=r"video_episodes=\(5,\) name episodes past the last"):
        EvalConfig(envs="mujoco:reach_around", episodes=2, video_episodes=(5,), out="x")


def test_eval_cameras_reach_mujoco_envs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _exit2(monkeypatch, capsys, *EVAL, "--policy", "expert", "--cameras", "front",
                 "--env-arg", "camera=top")  # fmt: skip
    assert "both set the cameras" in err
    from embodied.apps.evaluation import evaluate

    monkeypatch.setattr(sys, "argv", ["embodied", *EVAL, "--policy", "expert", "--json",
                                      "--cameras", "front", "--out", str(tmp_path / "e")])  # fmt: skip
    seen: dict[str, object] = {}

    def spy(config: EvalConfig, *args: object, **kwargs: object) -> object:
        seen.update(config.env_kwargs)
        raise ConfigError("stop here")

    monkeypatch.setattr("embodied.apps.cli.cmd_eval.evaluate", spy)
    with pytest.raises(SystemExit):
        main()
    assert seen["mujoco"] == {"camera": ["front"]}
    assert evaluate is not spy


def test_a_missing_checkpoint_says_so(tmp_path: Path) -> None:
    import policies

    with pytest.raises(CheckpointError, match="does not exist"):
        policies.load(str(tmp_path / "runs" / "nothing"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(CheckpointError, match="is a file, not a checkpoint folder"):
        policies.load(str(tmp_path / "file"))


HELP_IMPORTS_TORCH = {"demo", "lab pdp", "lab reppo"}
"""Commands whose options still come from modules that import torch (their configs live beside
the experiment code); every other command's ``--help`` must stay light."""


def test_help_does_not_import_torch() -> None:
    """``embodied train --help`` took ~9 s on a loaded machine because building its options
    imported torch and transformers; options come from light config modules now. The lab's
    commands (``embodied lab steer``, ...) are checked as the product's are."""
    import subprocess

    from embodied.apps.cli import MOUNTED, command_modules

    lab = MOUNTED["lab"]
    names = [n for n in command_modules() if n not in MOUNTED]
    names += [f"lab {n}" for n in command_modules(lab)]
    light = sorted(set(names) - HELP_IMPORTS_TORCH)
    assert {"train", "lab steer", "lab shield", "eval", "collect", "deploy", "tune"} <= set(light)
    code = (
        "import sys\n"
        "from embodied.apps.cli import _load, command_modules\n"
        f"for path in {light!r}:\n"
        "    *group, name = path.split()\n"
        f"    package = {lab!r} if group else 'embodied.apps.cli'\n"
        "    command = _load(name, command_modules(package)[name])\n"
        "    command.get_help(command.make_context(name, [], resilient_parsing=True))\n"
        "    for sub in getattr(command, 'commands', {}).values():\n"
        "        sub.get_help(sub.make_context(sub.name, [], resilient_parsing=True))\n"
        "print('HEAVY', sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip().splitlines()[-1] == "HEAVY []", out.stdout[-2000:] + out.stderr
