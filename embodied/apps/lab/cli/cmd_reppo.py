"""RePPO (ReMax PPO): train a policy, or compare RePPO with PPO at equal budget.

`embodied lab reppo experiment --out DIR --budget cpu` trains PPO (m = 1) and RePPO (m > 1) with
the same network, hyperparameters and steps on MinAtar games and mujoco:reach_around, >= 3
seeds, and writes results.json, results.md and curves.png. `embodied lab reppo train` trains one
policy and saves it as a stable-baselines3 zip (load with controllers.rl.reppo.RePPO.load).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from embodied.apps.cli._config_options import Opt, config_options, nest, nested_options
from embodied.apps.lab.reppo import (
    BUDGETS,
    RePPOExperimentConfig,
    results_markdown,
    run_experiment,
    train_one,
)
from embodied.errors import ConfigError

reppo_app = typer.Typer(help=__doc__, no_args_is_help=True)


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@reppo_app.command("experiment")
@config_options(
    RePPOExperimentConfig,
    *(Opt(f, given_only=True) for f in ("envs", "ms", "seeds", "total_timesteps", "eval_episodes")),
    *nested_options(RePPOExperimentConfig, "ppo", given_only=True),
)
def experiment_cmd(
    out: Path = typer.Option(..., "--out", help="Output folder (results.json/.md, curves.png)."),
    budget: str = typer.Option(
        "cpu",
        help=f"Budget preset {sorted(BUDGETS)}: cpu = 3 envs x m in (1, 1.5, 3) x 3 seeds x 200k "
        "steps (27 runs, about 60 min on 2 CPU cores); smoke = seconds. Given options override it.",
    ),
    *,
    config: dict[str, Any],
) -> None:
    """PPO (m = 1) vs RePPO (m > 1) at equal budget: final return and exploration."""
    cfg = RePPOExperimentConfig.for_budget(budget, **nest(config))
    summary = run_experiment(out, cfg, log=_log)
    print(results_markdown(summary["aggregate"], cfg))
    print(f"wrote {out / 'results.json'}, {out / 'results.md'}, {out / 'curves.png'}")


@reppo_app.command("train")
def train_cmd(
    out: Path = typer.Option(..., "--out", help="Model file (stable-baselines3 .zip)."),
    env: str = typer.Option(
        "minatar:breakout", "--env", help="minatar:<game> or mujoco:reach_around."
    ),
    m: float = typer.Option(1.5, "--m", help="Retry parameter (1 = PPO; > 1 explores more)."),
    steps: int = typer.Option(40_000, "--steps", help="Environment steps."),
    seed: int = typer.Option(0, "--seed", help="Training seed."),
) -> None:
    """Train one RePPO (or, with --m 1, PPO) policy and save it."""
    if out.suffix != ".zip":
        raise ConfigError(f"--out {out} must end in .zip", fix="e.g. --out runs/reppo.zip")
    cfg = RePPOExperimentConfig(envs=(env,), ms=(m,), seeds=1, total_timesteps=steps)
    out.parent.mkdir(parents=True, exist_ok=True)
    run = train_one(env, cfg.ms[0], seed, cfg, save_to=out)
    run.pop("curve")
    print(json.dumps({"path": str(out), **run}))


def register(app: typer.Typer) -> None:
    """Add the ``reppo`` command group to ``app``."""
    app.add_typer(reppo_app, name="reppo")
