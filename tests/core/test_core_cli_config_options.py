"""CLI options generated from config dataclasses: help = field doc, default = field default."""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from controllers.rl.configuration_rl import PPOSettings
from embodied.apps.cli import app
from embodied.apps.cli._config_options import field_docs
from embodied.apps.evaluation import EvalConfig
from embodied.apps.evaluation.sweep import SweepConfig
from embodied.apps.lab.judge_rl import JudgeRLConfig
from embodied.apps.lab.pdp import PDPEvalConfig, PDPExperimentConfig
from embodied.apps.lab.reppo import RePPOExperimentConfig
from embodied.apps.lab.shield import ShieldExperimentConfig
from embodied.apps.lab.steer import ExperimentSettings, SteerExperimentConfig
from embodied.apps.training.config_vla import TinyVLAConfig
from embodied.apps.tune.configuration_tune import ServerConfig, TuneConfig
from embodied.rewards.demo2reward import Demo2RewardConfig
from policies.diffusion.configuration_pdp import ManifoldConfig, PDPConfig

# every config a command generates options from (all their fields must be documented)
CONFIGS = [
    PDPConfig,
    ManifoldConfig,
    EvalConfig,
    TuneConfig,
    ServerConfig,
    SweepConfig,
    Demo2RewardConfig,
    SteerExperimentConfig,
    ExperimentSettings,
    PDPExperimentConfig,
    PDPEvalConfig,
    ShieldExperimentConfig,
    RePPOExperimentConfig,
    JudgeRLConfig,
    PPOSettings,
    TinyVLAConfig,
]

_STEER_DIRECTION = (
    [(SteerExperimentConfig, "--env", "env_id", None)]
    + [
        (SteerExperimentConfig, f"--{name.replace('_', '-')}", name, None)
        for name in ("dataset", "image_key", "kind", "layer", "positions", "neurons", "unnorm_key")
    ]
    + [(SteerExperimentConfig, "--layout", "layout", None)]
)

# command -> its generated options: (config, flag, dotted field, default shown if not the field's)
COMMANDS: dict[tuple[str, ...], list[Any]] = {
    ("train", "pdp"): [
        (PDPConfig, f"--{name.replace('.', '-').replace('_', '-')}", name, None)
        for name in (
            "steps",
            "manifold.steps",
            "z_dim",
            "denoiser",
            "hidden_dim",
            "horizon",
            "n_action_steps",
            "n_obs_steps",
            "batch_size",
            "lr",
            "seed",
        )
    ],
    ("eval",): [(EvalConfig, "--env", "envs", None)]
    + [
        (EvalConfig, f"--{name.replace('_', '-')}", name, None)
        for name in (
            "episodes",
            "workers",
            "video_episodes",
            "seed",
            "max_steps",
            "backend",
            "judge",
        )
    ],
    ("tune",): [(TuneConfig, "--env", "env_id", None)]
    + [
        (TuneConfig, f"--{name}", name, None)
        for name in ("policy", "concept", "knob", "setpoint", "controller", "seed", "pace")
    ]
    + [(ServerConfig, f"--{name}", name, None) for name in ("host", "port", "token")]
    + [(ServerConfig, "--allow-host", "allowed_hosts", None)],
    ("sweep",): [
        (SweepConfig, "--env", "env", "mujoco:arm_reach"),
        (SweepConfig, "--policy", "policy", "expert_speed_knob"),
        (SweepConfig, "--workers", "workers", "2"),
    ]
    + [
        (SweepConfig, f"--{name.replace('_', '-')}", name, None)
        for name in (
            "controller",
            "concept",
            "knob",
            "setpoint",
            "episodes",
            "max_steps",
            "settle_s",
            "seed",
            "backend",
            "address",
        )
    ],
    ("lab", "reward", "optimize"): [
        (Demo2RewardConfig, f"--{name.replace('_', '-')}", name, None)
        for name in ("template", "iterations", "restarts", "budget", "stride", "min_tpr", "seed")
    ],
    ("lab", "reward", "experiment"): [
        (Demo2RewardConfig, f"--{name.replace('_', '-')}", name, None)
        for name in ("iterations", "restarts", "budget", "min_tpr")
    ]
    + [(Demo2RewardConfig, "--stride", "stride", "2")],
    ("lab", "steer", "extract"): [
        *_STEER_DIRECTION,
        (SteerExperimentConfig, "--demonstration-episodes", "extraction_episodes", None),
    ],
    ("lab", "steer", "experiment"): _STEER_DIRECTION
    + [
        (SteerExperimentConfig, f"--{name.replace('_', '-')}", name, None)
        for name in (
            "model",
            "preset",
            "direction",
            "llm_layers",
            "demonstration_episodes",
            "train_steps",
            "bc_sampling",
            "retrain",
            "instruction_suffix",
            "image_size",
            "pid_kp",
            "pid_ki",
        )
    ]
    + [
        (ExperimentSettings, f"--{name.replace('_', '-')}", name, None)
        for name in (
            "setpoint",
            "episodes",
            "seed",
            "tuning_seed",
            "alpha_limit",
            "sweep_episodes",
            "sweep_alphas",
            "haeon_coefs",
            "haeon_words",
            "haeon_neurons",
            "haeon_top_k",
            "rl_timesteps",
            "rl_seed",
        )
    ],
    ("lab", "pdp", "experiment"): [
        (PDPExperimentConfig, "--demonstrations", "n_demonstrations", None),
        (PDPExperimentConfig, "--seeds", "seeds", None),
        (PDPExperimentConfig, "--first-seed", "first_seed", None),
        (PDPExperimentConfig, "--steps", "steps", None),
    ]
    + [
        (PDPEvalConfig, f"--{name.replace('_', '-')}", name, None)
        for name in ("n_eval", "n_shift_eval", "scenes")
    ],
    ("lab", "shield", "experiment"): [
        (ShieldExperimentConfig, f"--{name.replace('_', '-')}", name, None)
        for name in ("seeds", "timesteps", "exploration_steps", "hidden", "risk_bound", "delta")
    ]
    + [
        # the embedded PPO settings: PPOSettings' docs, the shield's defaults
        (ShieldExperimentConfig, "--n-steps", "ppo.n_steps", "1024"),
        (ShieldExperimentConfig, "--batch-size", "ppo.batch_size", None),
        (ShieldExperimentConfig, "--learning-rate", "ppo.learning_rate", None),
        (ShieldExperimentConfig, "--gamma", "ppo.gamma", None),
    ],
    ("lab", "shield", "train"): [
        (ShieldExperimentConfig, f"--{name.replace('_', '-')}", name, None)
        for name in ("timesteps", "horizon", "risk_bound", "eval_episodes")
    ],
    ("lab", "reppo", "experiment"): [
        (RePPOExperimentConfig, f"--{name.replace('_', '-')}", name, None)
        for name in ("envs", "ms", "seeds", "total_timesteps", "eval_episodes")
    ]
    + [
        (RePPOExperimentConfig, "--ent-coef", "ppo.ent_coef", None),
        (RePPOExperimentConfig, "--n-steps", "ppo.n_steps", "128"),
        (RePPOExperimentConfig, "--n-epochs", "ppo.n_epochs", "3"),
        (RePPOExperimentConfig, "--gae-lambda", "ppo.gae_lambda", None),
    ],
    ("lab", "reward", "rl"): [
        (JudgeRLConfig, f"--{name.replace('_', '-')}", name, None)
        for name in ("env", "judge", "seeds", "timesteps", "n_envs", "eval_episodes")
    ]
    + [
        (JudgeRLConfig, "--n-steps", "ppo.n_steps", "256"),
        (JudgeRLConfig, "--batch-size", "ppo.batch_size", "256"),
        (JudgeRLConfig, "--gamma", "ppo.gamma", None),
        (JudgeRLConfig, "--clip-range", "ppo.clip_range", None),
    ],
    ("train", "vla"): [(TinyVLAConfig, "--env", "env_id", None)]
    + [
        (TinyVLAConfig, f"--{name.replace('_', '-')}", name, None)
        for name in ("demonstration_episodes", "layout", "image_size", "llm_layers")
    ],
    ("lab", "pdp", "eval"): [
        (PDPEvalConfig, f"--{name.replace('_', '-')}", name, None)
        for name in ("n_eval", "n_shift_eval", "scenes", "seed")
    ],
}


def _flat(text: str) -> str:
    """Help text without the rich box and line wrapping."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def _field(cls: type, path: str) -> tuple[type, dataclasses.Field[object]]:
    *parents, name = path.split(".")
    for parent in parents:
        cls = typing.get_type_hints(cls)[parent]
    return cls, {f.name: f for f in dataclasses.fields(cls)}[name]


def _default_text(f: dataclasses.Field[object]) -> str | None:
    default = f.default
    if default is dataclasses.MISSING:
        return None
    if default is None or default in ((), ""):
        return None  # typer shows no default for these
    if isinstance(default, tuple):
        return ",".join(map(str, default))
    return str(default)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.__name__)
def test_every_config_field_has_a_doc(config: type) -> None:
    docs = field_docs(config)
    missing = [f.name for f in dataclasses.fields(config) if f.init and not docs.get(f.name)]
    assert not missing, f"{config.__name__} fields without a docstring entry: {missing}"


def test_field_docs_join_continuation_lines() -> None:
    docs = field_docs(ManifoldConfig)
    assert docs["seq_len"].startswith("compact: demonstrations are resampled to this many steps")
    assert docs["seq_len"].endswith("at the policy horizon's length.")
    assert "(the KL weight is small). The project's extension" in docs["standardize_z"]
    assert "Derived" not in " ".join(field_docs(EvalConfig).values())


@pytest.mark.parametrize("command", list(COMMANDS), ids=" ".join)
def test_help_shows_field_doc_and_default(command: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "2000"})
    assert result.exit_code == 0, result.output
    text = _flat(result.output)
    for config, flag, path, cli_default in COMMANDS[command]:
        owner, f = _field(config, path)
        doc = field_docs(owner)[f.name]
        shown = f"{path.rsplit('.', 1)[0]}: {doc}" if "." in path else doc
        default = cli_default or _default_text(f)
        if isinstance(f.default, bool):
            default = flag.removeprefix("--") if f.default else f"no-{flag.removeprefix('--')}"
        expected = f"{flag} " + r"(--no-\S+ )?<\S+> " + re.escape(shown)
        if default is not None:
            expected += " " + re.escape(f"[default: {default}]")
        assert re.search(expected, text), (flag, expected, text)


def test_eval_round_trip_reaches_the_config(tmp_path: Path) -> None:
    out = tmp_path / "ev"
    argv = ["eval", "--env", "mujoco:reach_around", "--policy", "random", "--workers", "0"]
    argv += ["--episodes", "2", "--seed", "7", "--max-steps", "5", "--video-episodes", "1"]
    result = CliRunner().invoke(app, [*argv, "--out", str(out), "--backend", "inline", "--json"])
    assert result.exit_code == 0, result.output
    config = json.loads((out / "results.json").read_text())["config"]
    assert config["envs"] == ["mujoco:reach_around"]
    assert (config["episodes"], config["seed"], config["max_steps"]) == (2, 7, 5)
    assert (config["workers"], config["backend"]) == (0, "inline")
    assert config["video_episodes"] == [1]


def test_bad_comma_list_is_a_config_error() -> None:
    from embodied.errors import ConfigError

    argv = ["eval", "--env", "mujoco:reach_around", "--policy", "random"]
    result = CliRunner().invoke(app, [*argv, "--video-episodes", "0,x"])
    assert isinstance(result.exception, ConfigError)
    assert "--video-episodes '0,x'" in str(result.exception)


def test_sweep_round_trip_reaches_the_config(tmp_path: Path) -> None:
    argv = ["sweep", "--grid", "kp=1.0", "--backend", "inline", "--workers", "0", "--json"]
    argv += ["--episodes", "1", "--max-steps", "4", "--seed", "9", "--setpoint", "0.1"]
    argv += ["--settle-s", "0.5", "--concept", "ee_speed"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    config = json.loads(result.output.strip().splitlines()[-1])["config"]
    assert (config["episodes"], config["max_steps"], config["seed"]) == (1, 4, 9)
    assert (config["setpoint"], config["settle_s"], config["backend"]) == (0.1, 0.5, "inline")
    assert (config["env"], config["policy"]) == ("mujoco:arm_reach", "expert_speed_knob")


def test_sweep_starts_from_a_saved_gains_file(tmp_path: Path) -> None:
    """The gains file the tuning page saves is read by sweep too (--set and --grid override)."""
    import controllers

    gains = tmp_path / "gains.yaml"
    controllers.save(controllers.make("pid", kp=2.0, ki=30.0, kff=0.1), gains)
    base = ["sweep", "--grid", "kp=1.0", "--backend", "inline", "--workers", "0", "--json"]
    base += ["--episodes", "1", "--max-steps", "4", "--setpoint", "0.1"]
    result = CliRunner().invoke(app, [*base, "--gains", str(gains), "--set", "ki=40"])
    assert result.exit_code == 0, result.output
    config = json.loads(result.output.strip().splitlines()[-1])["config"]
    assert config["controller_params"]["kff"] == 0.1 and config["controller_params"]["ki"] == 40
    fixed = tmp_path / "fixed.yaml"
    controllers.save(controllers.make("fixed", value=0.5), fixed)
    bad = CliRunner().invoke(app, [*base, "--gains", str(fixed)])
    assert bad.exit_code != 0 and "pass --controller fixed" in str(bad.exception)


def test_steer_options_reach_the_experiment_configs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import embodied.apps.lab.steer as steer
    import embodied.apps.lab.steer_report as steer_report

    seen: dict[str, Any] = {}

    def fake_experiment(out: Path, config: Any, settings: Any, log: Any) -> dict[str, Any]:
        seen.update(out=out, config=config, settings=settings)
        return {}

    # the command imports the experiment when it runs (its --help stays light)
    monkeypatch.setattr(steer, "steer_experiment", fake_experiment)
    monkeypatch.setattr(steer_report, "markdown_table", lambda report: "table")
    argv = ["lab", "steer", "experiment", "--out", str(tmp_path), "--demonstration-episodes", "3"]
    argv += ["--dataset", "data", "--retrain", "--pid-kp", "2.5", "--layer", "1"]
    argv += ["--sweep-alphas", "-1,0", "--sweep-episodes", "0", "--setpoint", "0.1"]
    argv += ["--haeon-coefs", "1,2", "--setpoints", "0.06,0.1,0.15", "--setpoint-change-s", "1"]
    argv += ["--speed-labels", "continuum", "--method", "probe", "--speed-range", "0.05,0.2"]
    argv += ["--concept", "height", "--height-range", "0.04,0.12"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    assert seen["out"] == tmp_path
    # one --concept reaches both: what the demonstrations vary and what is tracked
    assert seen["config"] == SteerExperimentConfig(
        demonstration_episodes=3, dataset=Path("data"), retrain=True, pid_kp=2.5, layer=1,
        speed_labels="continuum", method="probe", speed_range=(0.05, 0.2), concept="height",
        height_range=(0.04, 0.12),
    )  # fmt: skip
    assert seen["settings"] == ExperimentSettings(
        sweep_alphas=(-1.0, 0.0), sweep_episodes=0, setpoint=0.1, haeon_coefs=(1.0, 2.0),
        setpoints=(0.06, 0.1, 0.15), setpoint_change_s=1.0, concept="height",
    )  # fmt: skip


def test_a_height_range_beyond_the_experts_hover_limit_is_refused_with_the_limit() -> None:
    """The config refuses what ``ArmReachExpert`` would, naming its limit, before any work."""
    from embodied.errors import ConfigError
    from sim.mujoco.arm_reach import MAX_HOVER_M

    SteerExperimentConfig(concept="height", speed_labels="continuum", height_range=(0.03, 0.2))
    with pytest.raises(ConfigError, match=rf"height_range=.*within \(0, {MAX_HOVER_M:g}\]"):
        SteerExperimentConfig(
            concept="height", speed_labels="continuum", height_range=(0.03, MAX_HOVER_M + 0.01)
        )


@pytest.mark.parametrize("starts", [(0.22, 0.06), (0.01, 0.2), (0.06, 0.5)])
def test_a_height_start_range_out_of_reach_or_reversed_is_refused(
    starts: tuple[float, float],
) -> None:
    from embodied.errors import ConfigError
    from sim.mujoco.arm_reach import START_Z_M

    SteerExperimentConfig(height_start_range=START_Z_M)
    with pytest.raises(ConfigError, match=r"height_start_range=.*within the arm's reach"):
        SteerExperimentConfig(height_start_range=starts)


def test_height_descents_need_the_height_concept_and_a_drawn_start() -> None:
    from embodied.errors import ConfigError

    ok = {"concept": "height", "speed_labels": "continuum", "height_start_range": (0.06, 0.26)}
    assert SteerExperimentConfig(**ok, height_descents=96).height_descents == 96
    with pytest.raises(ConfigError, match=r"height_descents=96 .*concept is 'speed'"):
        SteerExperimentConfig(height_descents=96)
    with pytest.raises(ConfigError, match=r"height_descents=96 .*--height-start-range MIN,MAX"):
        SteerExperimentConfig(**{**ok, "height_start_range": (0.15, 0.15)}, height_descents=96)
    with pytest.raises(ConfigError, match=r"height_descents=-1"):
        SteerExperimentConfig(**ok, height_descents=-1)


def test_steer_extract_options_reach_the_extraction(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import types

    import embodied.apps.lab.steer as steer_app_module
    import policies.openvla.loading_openvla as loading_openvla

    seen: dict[str, Any] = {}
    model = types.SimpleNamespace(config=types.SimpleNamespace(image_size=64))
    # the command imports its loader when it runs (its --help stays light)
    monkeypatch.setattr(loading_openvla, "load_pretrained", lambda name: (model, "proc"))

    monkeypatch.setattr(
        steer_app_module, "demonstrations_from_dataset", lambda path, key: ("steps", path, key)
    )

    def fake_extract(m: Any, proc: Any, steps: Any, layer: Any, kind: Any, **kw: Any) -> Any:
        seen.update(steps=steps, layer=layer, kind=kind, **kw)
        return types.SimpleNamespace(save=lambda out: out, layer=layer, meta={})

    monkeypatch.setattr(steer_app_module, "extract_intervention", fake_extract)
    argv = ["lab", "steer", "extract", "--model", "m", "--out", str(tmp_path / "dir")]
    argv += ["--dataset", "data.hdf5", "--image-key", "image.agentview", "--kind", "neurons"]
    result = CliRunner().invoke(app, [*argv, "--neurons", "8", "--positions", "text"])
    assert result.exit_code == 0, result.output
    assert seen == {
        "steps": ("steps", "data.hdf5", "image.agentview"),
        "layer": None,
        "kind": "neurons",
        "neurons": 8,
        "unnorm_key": None,
        "positions": "text",
    }


def test_pdp_options_reach_the_experiment_and_eval_configs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import embodied.apps.lab.cli.cmd_pdp as cmd_pdp

    seen: dict[str, Any] = {}

    def fake_run(out: Path, config: Any) -> dict[str, Any]:
        seen["experiment"] = config
        return {"runs": [], "aggregate": {}}

    def fake_evaluate(pdp: Path, dp: Path, out: Path, config: Any) -> dict[str, Any]:
        seen["eval"] = config
        return {}

    monkeypatch.setattr(cmd_pdp, "run_experiment", fake_run)
    monkeypatch.setattr(cmd_pdp, "evaluate", fake_evaluate)
    monkeypatch.setattr(cmd_pdp, "results_markdown", lambda runs, agg=None: "table")
    argv = [
        "lab",
        "pdp",
        "experiment",
        "--out",
        str(tmp_path),
        "--demonstrations",
        "7",
        "--seeds",
        "2",
    ]
    argv += ["--first-seed", "3", "--steps", "5", "--n-eval", "4", "--scenes", "block_left"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    assert seen["experiment"] == PDPExperimentConfig(
        n_demonstrations=7,
        seeds=2,
        first_seed=3,
        steps=5,
        evaluation=PDPEvalConfig(n_eval=4, scenes=("block_left",)),
    )
    assert seen["experiment"].train_seeds == (3, 4)
    argv = ["lab", "pdp", "eval", "--pdp", "a", "--dp", "b", "--out", str(tmp_path), "--seed", "9"]
    result = CliRunner().invoke(app, [*argv, "--n-shift-eval", "2"])
    assert result.exit_code == 0, result.output
    assert seen["eval"] == PDPEvalConfig(seed=9, n_shift_eval=2)
