"""`embodied lab reward rl`: PPO with the success reward from the simulator, the judge, or the
judge with a Demo2Reward instruction, each scored by the simulator (smoke-sized, real envs,
real SB3 PPO, the shipped judge on rendered frames)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.torch import load_file
from typer.testing import CliRunner

from controllers.rl.configuration_rl import merge_ppo_layers
from embodied.apps.cli import app
from embodied.apps.lab import judge_rl
from embodied.apps.lab.judge_rl import JudgeRLConfig
from embodied.errors import ConfigError


def _instruction(tmp_path: Path, template: str) -> Path:
    path = tmp_path / "d2r" / "instruction.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"instruction": template}))
    return path


def test_cli_smoke_runs_every_arm_and_writes_results(tmp_path: Path) -> None:
    d2r = _instruction(tmp_path, "the {task} is done")
    out = tmp_path / "rl"
    argv = [
        "lab",
        "reward",
        "rl",
        "--out",
        str(out),
        "--budget",
        "smoke",
        "--d2r-instruction",
        str(d2r),
    ]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "results.json").read_text())
    assert [r["arm"] for r in summary["runs"]] == ["oracle", "judge", "judge_d2r"]
    assert summary["instructions"]["judge_d2r"] == "the {task} is done"
    for run in summary["runs"]:
        assert run["train_steps"] >= 512 and run["train_episodes"] >= 1
        assert 0 <= run["eval_successes"] <= run["eval_episodes"] == 2
        if run["arm"] == "oracle":  # no judge in the loop
            assert run["train_false_reward_steps"] == 0
        state = load_file(str(out / "policies" / f"{run['arm']}_seed0.safetensors"))
        assert any(k.startswith("action_net") for k in state)
    assert "| judge_d2r |" in (out / "results.md").read_text()
    # a rerun with the same config finds every run done and trains nothing
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    assert json.loads((out / "results.json").read_text())["runs"] == summary["runs"]


class AlwaysYes:
    """A judge that calls every clip a success."""

    threshold = 0.5
    n_frames = 5

    def __init__(self) -> None:
        self.texts: list[str] = []

    def score(self, frames: np.ndarray, instruction: str) -> float:
        assert frames.ndim == 4 and frames.shape[-1] == 3  # a clip of rendered frames
        self.texts.append(instruction)
        return 1.0


def test_judge_arm_reward_and_episode_end_come_from_the_judge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    judge = AlwaysYes()
    monkeypatch.setattr(judge_rl, "load_arm_judge", lambda cfg: judge)
    d2r = _instruction(tmp_path, "clearly {task}")
    cfg = JudgeRLConfig(
        **{**judge_rl.BUDGETS["smoke"], "arms": "judge,judge_d2r", "d2r_instruction": str(d2r)}
    )
    summary = judge_rl.run_experiment(tmp_path / "rl", cfg, log=lambda _m: None)
    for run in summary["runs"]:
        # every episode ends on its first step with the judge's reward, which the simulator
        # (ball far from the goal) calls a failure every time
        assert run["train_episodes"] == run["train_steps"]
        assert run["train_rewarded_episodes"] == run["train_episodes"]
        assert run["train_false_reward_steps"] == run["train_steps"]
    assert judge.texts and all(t.startswith("clearly ") for t in judge.texts[-10:])
    generic = [t for t in judge.texts if not t.startswith("clearly ")]
    assert generic and all(
        t.startswith("Evaluate the behavior of this simulated robot.") for t in generic
    )


def test_d2r_arm_that_kept_the_generic_instruction_is_the_judge_arm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from embodied.rewards.demo2reward import DEFAULT_TEMPLATE

    trained: list[str] = []
    real = judge_rl.train_arm

    def counting(cfg: JudgeRLConfig, arm: str, seed: int, judge: Any) -> Any:
        trained.append(arm)
        return real(cfg, arm, seed, judge)

    monkeypatch.setattr(judge_rl, "train_arm", counting)
    monkeypatch.setattr(judge_rl, "load_arm_judge", lambda cfg: AlwaysYes())
    d2r = _instruction(tmp_path, DEFAULT_TEMPLATE)
    cfg = JudgeRLConfig(
        **{**judge_rl.BUDGETS["smoke"], "arms": "judge,judge_d2r", "d2r_instruction": str(d2r)}
    )
    summary = judge_rl.run_experiment(tmp_path / "rl", cfg, log=lambda _m: None)
    assert trained == ["judge"]
    judge_run, d2r_run = summary["runs"]
    assert d2r_run["same_as"] == "judge" and d2r_run["arm"] == "judge_d2r"
    assert {k: v for k, v in d2r_run.items() if k not in ("arm", "same_as")} == {
        k: v for k, v in judge_run.items() if k != "arm"
    }
    assert (
        "judge_d2r (instruction = judge's: its runs)"
        in (tmp_path / "rl" / "results.md").read_text()
    )


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"arms": "oracle,bogus"}, "arms='oracle,bogus' names unknown arms ['bogus']"),
        ({"arms": "judge_d2r"}, "d2r_instruction='' is empty"),
        ({"timesteps": 0}, "timesteps=0"),
        ({"eval_seed0": 1, "seeds": 3}, "eval_seed0=1 overlaps"),
        ({"ppo": {"gamma": 1.5}}, "gamma=1.5"),
        ({"ppo": {"n_steps": 0}}, "n_steps=0 must be >= 1"),
        ({"ppo": {"bogus": 1}}, "unknown PPO setting(s) ['bogus']"),
    ],
)
def test_bad_config_names_the_key(options: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(named)):
        JudgeRLConfig(**merge_ppo_layers(judge_rl.JUDGE_RL_PPO, {"arms": "oracle"}, options))


def test_cli_bad_budget_exits_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["lab", "reward", "rl", "--out", str(tmp_path), "--budget", "huge"]
    )
    assert result.exit_code == 2 and "budget 'huge'" in result.output, result.output
    argv = ["lab", "reward", "rl", "--out", str(tmp_path), "--arms", "judge_d2r"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2 and "d2r_instruction" in result.output, result.output


def test_parallel_workers_give_the_same_runs(tmp_path: Path) -> None:
    cfg = JudgeRLConfig(**{**judge_rl.BUDGETS["smoke"], "arms": "oracle", "seeds": 2})
    one = judge_rl.run_experiment(tmp_path / "one", cfg, log=lambda _m: None)
    two = judge_rl.run_experiment(tmp_path / "two", cfg, log=lambda _m: None, workers=2)

    def strip(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if k != "train_seconds"} for r in runs]

    assert [r["seed"] for r in two["runs"]] == [0, 1]
    assert strip(two["runs"]) == strip(one["runs"])
    for seed in (0, 1):
        a = load_file(str(tmp_path / "one" / "policies" / f"oracle_seed{seed}.safetensors"))
        b = load_file(str(tmp_path / "two" / "policies" / f"oracle_seed{seed}.safetensors"))
        assert all(np.array_equal(a[k].numpy(), b[k].numpy()) for k in a)
