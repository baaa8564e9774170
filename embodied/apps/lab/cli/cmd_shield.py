"""Safe RL with robust-MDP shields: the experiment, and training one shielded policy.

`embodied lab shield experiment` compares unshielded PPO with shielded MaskablePPO on
mujoco:reach_around with a no-go zone (same env-step budget, seeds and network) and writes
results.json, results.md and blocked_vs_data.png. `embodied lab shield train` trains one shielded
policy and saves its shield (plug it into `embodied deploy --shield`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from embodied.apps.cli._config_options import Opt, config_options, nest, nested_options
from embodied.apps.lab.shield import (
    BUDGETS,
    ShieldExperimentConfig,
    results_markdown,
    run_experiment,
    train_one,
)

shield_app = typer.Typer(help=__doc__, no_args_is_help=True)

_COMMON = (
    *(
        Opt(f, given_only=True)
        for f in (
            "timesteps",
            "exploration_steps",
            "exploration_episode_steps",
            "hidden",
            "eval_episodes",
            "eval_seed0",
            "horizon",
            "risk_bound",
            "delta",
        )
    ),
    *nested_options(ShieldExperimentConfig, "ppo", given_only=True),
)
"""Options both commands share; given ones override the budget preset."""

_BUDGET_HELP = (
    f"Budget preset {sorted(BUDGETS)}: cpu = 3 seeds x 2 arms, 150k env steps per run (about "
    "25 min on 2 shared CPU cores); smoke = seconds. Options given explicitly override it."
)


@shield_app.command("experiment")
@config_options(
    ShieldExperimentConfig,
    Opt("seeds", given_only=True),
    Opt("first_seed", given_only=True),
    Opt("plots", given_only=True),
    *_COMMON,
)
def experiment_cmd(
    out: Path = typer.Option(..., "--out", help="Output folder (results.json, results.md, plot)."),
    budget: str = typer.Option("cpu", help=_BUDGET_HELP),
    *,
    config: dict[str, Any],
) -> None:
    """Unshielded PPO vs shielded MaskablePPO: violations in training and evaluation, return,
    success, and the shield's blocked share vs the data it has seen."""
    cfg = ShieldExperimentConfig.for_budget(budget, **nest(config))
    summary = run_experiment(out, cfg)
    print(results_markdown(summary))
    print(f"wrote {out / 'results.json'}, {out / 'results.md'}")


@shield_app.command("train")
@config_options(ShieldExperimentConfig, *_COMMON)
def train_cmd(
    out: Path = typer.Option(..., "--out", help="Output folder (shield/, policy, train.json)."),
    budget: str = typer.Option("cpu", help=_BUDGET_HELP),
    seed: int = typer.Option(0, "--seed", help="Training seed."),
    *,
    config: dict[str, Any],
) -> None:
    """Train one shielded MaskablePPO policy; save the shield next to the policy weights."""
    cfg = ShieldExperimentConfig.for_budget(budget, **nest(config))
    result = train_one(out, cfg, seed)
    keys = ("train_violations", "eval_violations", "eval_successes", "eval_episodes")
    print(json.dumps({k: result[k] for k in keys}))
    print(
        f"wrote {out / 'shield'} (embodied deploy --shield {out / 'shield'}), {out / 'train.json'}"
    )


def register(app: typer.Typer) -> None:
    """Add the ``shield`` command group to ``app``."""
    app.add_typer(shield_app, name="shield")
