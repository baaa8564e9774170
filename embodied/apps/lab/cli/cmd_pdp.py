"""Parameterized Diffusion Policy: experiment, evaluate, adapt z, demo.

`embodied lab pdp experiment` runs it all (collect demonstrations, train PDP + DP in both policy
variants and several training seeds, evaluate with equal-budget baselines, aggregate);
training alone is `embodied train pdp`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
import typer

from embodied.apps.cli._config_options import Opt, config_options
from embodied.apps.lab.pdp import (
    BUDGETS,
    PDPEvalConfig,
    PDPExperimentConfig,
    aggregate,
    constraint_cost,
    evaluate,
    results_markdown,
    run_experiment,
    success_rate,
)
from embodied.apps.route_task import collect_demonstrations, make_env, quick_demo, run_episodes
from embodied.errors import ConfigError
from embodied.io import read_json_file, write_json, write_text
from policies.diffusion.adaptation import adapt_z_from_demonstration, search_z_cem
from policies.diffusion.policy_pdp import PDPPolicy

pdp_app = typer.Typer(help=__doc__, no_args_is_help=True)


def _threads(n: int) -> None:
    torch.set_num_threads(n)


@pdp_app.command("experiment")
@config_options(
    PDPEvalConfig,
    *(Opt(f, given_only=True) for f in ("n_eval", "n_shift_eval", "scenes", "adapt_steps")),
    into="evaluation",
)
@config_options(
    PDPExperimentConfig,
    Opt("n_demonstrations", flag="--demonstrations", given_only=True),
    *(Opt(f, given_only=True) for f in ("seeds", "first_seed", "modes", "steps")),
)
def experiment_cmd(
    out: Path = typer.Option(
        ..., "--out", help="Output folder (demonstrations, checkpoints, results)."
    ),
    budget: str = typer.Option(
        "full",
        help=f"Budget preset {sorted(BUDGETS)}: full = 3 training seeds x both modes, 50 "
        "episodes per cell, 6 scenes, the reference's 5000 manifold epochs (a GPU job); cpu = "
        "the same protocol on the 3 one-wall scenes with 100 manifold epochs (hours on 2 CPU "
        "cores); smoke = minutes. Options given explicitly override the preset.",
    ),
    threads: int = typer.Option(1, help="torch CPU threads."),
    *,
    config: dict[str, Any],
    evaluation: dict[str, Any],
) -> None:
    """Full evaluation on mujoco:reach_around (both policy variants, DP baselines with the same
    budgets); writes results.json/.md and PNG plots."""
    _threads(threads)
    cfg = PDPExperimentConfig.for_budget(budget, **config, evaluation=evaluation)
    summary = run_experiment(out, cfg)
    print(results_markdown(summary["runs"], summary["aggregate"]))
    print(f"wrote {out / 'results.md'}")


@pdp_app.command("aggregate")
def aggregate_cmd(
    runs: list[Path] = typer.Argument(..., help="Output folders of `embodied lab pdp experiment`."),
    out: Path = typer.Option(..., "--out", help="Folder for the combined results.json/.md."),
) -> None:
    """Combine experiment runs (e.g. one per training seed or mode, run in parallel)."""
    all_runs: list[dict[str, Any]] = []
    for run in runs:
        data = read_json_file(run / "results.json", what="PDP experiment results")
        if "runs" not in data:
            raise ConfigError(
                f"{run / 'results.json'} has no 'runs' (keys: {sorted(data)})",
                fix="pass output folders of `embodied lab pdp experiment`",
            )
        all_runs += data["runs"]
    agg = aggregate(all_runs)
    write_json(
        out / "results.json",
        {"runs": all_runs, "aggregate": agg, "sources": [str(r) for r in runs]},
    )
    md = results_markdown(all_runs, agg)
    write_text(out / "results.md", md)
    print(md)


@pdp_app.command("eval")
@config_options(PDPEvalConfig, "n_eval", "n_shift_eval", "scenes", "seed", "adapt_steps")
def eval_cmd(
    pdp: Path = typer.Option(..., "--pdp", help="PDP checkpoint folder (embodied train pdp)."),
    dp: Path = typer.Option(..., "--dp", help="Same policy variant trained with --z-dim 0."),
    out: Path = typer.Option(..., "--out", help="Folder for results.json/.md and PNGs."),
    threads: int = typer.Option(1, help="torch CPU threads."),
    *,
    config: dict[str, Any],
) -> None:
    """Evaluate PDP vs DP of one variant: success, mode coverage, shifted scenes, plots."""
    _threads(threads)
    res = evaluate(pdp, dp, out, PDPEvalConfig(**config))
    print(results_markdown([res]))


ADAPT_DEMONSTRATION_SEED0 = 40000
"""``pdp adapt``: first seed of the adaptation demonstration. The demonstration, the CEM search
rollouts and the evaluation episodes use disjoint seed blocks (and none of the experiment's),
so the adapted z is never scored on an episode it was fitted to."""
ADAPT_CEM_SEED0 = 45000
"""``pdp adapt``: first seed of the CEM search rollouts."""
ADAPT_EVAL_SEED0 = 50000
"""``pdp adapt``: first seed of the before/after evaluation episodes."""


ADAPT_METHODS = ("demonstration", "demonstration-zero", "cem")
"""``pdp adapt`` methods: the reference one-demonstration adaptation (encoder warm start +
optimisation of z), the same from z = 0 (ablation), and the constraint-only CEM search (the
project's extension)."""


@pdp_app.command("adapt")
def adapt_cmd(
    policy: Path = typer.Option(..., "--policy", help="PDP checkpoint folder."),
    scene: str = typer.Option("block_left", help="Shifted scene of mujoco:reach_around."),
    method: str = typer.Option(
        "demonstration",
        help="demonstration (one expert demonstration; the reference: encoder warm start, then "
        "Adam on z), demonstration-zero (the same from z = 0; ablation) or cem (constraint "
        "only, no demonstration; the project's extension).",
    ),
    steps: int = typer.Option(300, help="Adam steps (demonstration methods)."),
    n_eval: int = typer.Option(10, help="Evaluation episodes before/after."),
    seed: int = typer.Option(0, help="Seed of the demonstration/search episodes."),
    threads: int = typer.Option(1, help="torch CPU threads."),
) -> None:
    """Adapt only z to a shifted scene and report success before/after (weights frozen)."""
    _threads(threads)
    if method not in ADAPT_METHODS:
        raise ConfigError(
            f"unknown adaptation method --method {method!r}", fix=f"use one of {ADAPT_METHODS}"
        )
    pol = PDPPolicy.from_pretrained(policy)
    env = make_env()
    ev = list(range(ADAPT_EVAL_SEED0 + seed, ADAPT_EVAL_SEED0 + seed + n_eval))
    before = success_rate(run_episodes(env, pol, ev, scene, z=np.zeros(pol.config.z_dim)))
    if method == "cem":
        cost = constraint_cost(
            env, pol, scene, [ADAPT_CEM_SEED0 + seed, ADAPT_CEM_SEED0 + seed + 1]
        )
        z = search_z_cem(cost, pol.config.z_dim, bound=pol.config.z_bound, seed=seed).z
    else:
        demonstration = collect_demonstrations(
            1, seed=ADAPT_DEMONSTRATION_SEED0 + seed, scene=scene
        )
        z = adapt_z_from_demonstration(
            pol,
            demonstration.states[0],
            demonstration.actions[0],
            steps=steps,
            seed=seed,
            z_init="encoder" if method == "demonstration" else "zero",
        ).z
    after = success_rate(run_episodes(env, pol, ev, scene, z=z))
    print(
        json.dumps(
            {
                "scene": scene,
                "method": method,
                "z": z.tolist(),
                "success_z0": before,
                "success_adapted": after,
                "n": n_eval,
            }
        )
    )


@pdp_app.command("demo")
def demo_cmd(
    out: Path = typer.Option(..., "--out", help="Output folder."),
    budget_s: float = typer.Option(90.0, help="Wall-time budget in seconds."),
    threads: int = typer.Option(1, help="torch CPU threads."),
) -> None:
    """Train a small PDP within the budget and roll it out once per route latent."""
    _threads(threads)
    print(json.dumps(quick_demo(out, budget_s=budget_s), indent=1))


def register(app: typer.Typer) -> None:
    """Add the ``pdp`` command group to ``app``."""
    app.add_typer(pdp_app, name="pdp")
