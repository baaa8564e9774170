"""Reward judges: record labelled demonstrations, run Demo2Reward.

Demo2Reward optimises a judge's instruction on a few labelled demonstrations.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from embodied.apps.cli._config_options import config_options
from embodied.apps.experiments.reward import BUILTIN_TASKS, format_table, heldout_experiment
from embodied.apps.training.data_minijudge import record_episodes
from embodied.io import write_json
from embodied.rewards import load_judge
from embodied.rewards.demo2reward import (
    PROPOSERS,
    Demo2RewardConfig,
    DemonstrationSet,
    load_demonstrations,
    optimize_instruction,
    save_demonstrations,
    save_result,
)

reward_app = typer.Typer(help=__doc__, no_args_is_help=True)


@reward_app.command("record")
def record(
    env: str = typer.Option(..., "--env", help="Built-in task, e.g. mujoco:arm_reach."),
    out: Path = typer.Option(..., "--out", help="Dataset folder to write."),
    n: int = typer.Option(6, "--n", help="Episodes."),
    kinds: str = typer.Option("expert", "--kinds", help="Comma list: expert,near,blocked,random."),
    seed: int = typer.Option(20000, "--seed", help="First reset seed."),
) -> None:
    """Record labelled demonstrations (frames + per-frame success labels) for `reward optimize`."""
    demonstrations = record_episodes(env, n, seed, kinds=[k.strip() for k in kinds.split(",") if k])
    save_demonstrations(demonstrations, out)
    print(
        f"wrote {len(demonstrations)} demonstrations to {out} "
        f"({sum(int(d.labels.sum()) for d in demonstrations)} positive frames)"
    )


@reward_app.command("optimize")
@config_options(
    Demo2RewardConfig, "template", "iterations", "restarts", "stride", "min_tpr", "seed"
)
def optimize(
    demonstrations: Path = typer.Option(
        ..., "--demonstrations", help="Labelled demonstrations folder (3 to 10 episodes)."
    ),
    out: Path = typer.Option(..., "--out", help="Folder for instruction.json."),
    judge: str = typer.Option("minijudge", "--judge", help="Judge spec (see `embodied judge`)."),
    heldout: Path = typer.Option(
        None, "--heldout", help="Held-out demonstrations to report before/after."
    ),
    proposer: str = typer.Option("offline", "--proposer", help="offline or llm."),
    proposer_model: str = typer.Option(
        None, "--proposer-model", help="LLM/VLM for --proposer llm."
    ),
    camera: str = typer.Option(None, "--camera", help="Camera key of the demonstrations."),
    device: str = typer.Option("auto", "--device"),
    as_json: bool = typer.Option(False, "--json", help="Print the result JSON."),
    *,
    config: dict[str, Any],
) -> None:
    """Run Demo2Reward and save the frozen instruction with its calibration table."""
    cfg = Demo2RewardConfig(**config)
    j = load_judge(judge, device=device)
    train = load_demonstrations(demonstrations, camera=camera)
    prop = PROPOSERS.make(
        proposer, **({"model": proposer_model, "device": device} if proposer == "llm" else {})
    )

    def show(row: dict) -> None:
        if not as_json:
            mark = "+" if row["accepted"] else " "
            print(
                f"{mark} r{row['restart']:>2} it{row['iteration']:>2} J={row['J']:7.2f} "
                f"TPR={row['tpr']:5.1f} FPR={row['fpr']:5.1f}  {row['template']}"
            )

    result = optimize_instruction(j, train, prop, cfg, progress=show)
    table = DemonstrationSet(train, cfg.n_context, cfg.stride, 3, 10).table(j, result.template)
    held = None
    if heldout is not None:
        hs = DemonstrationSet(
            load_demonstrations(heldout, camera=camera), cfg.n_context, cfg.stride
        )
        held = {
            "before": hs.evaluate(j, cfg.template).to_dict(),
            "after": hs.evaluate(j, result.template).to_dict(),
        }
    path = save_result(result, out, j.describe(), table, held)
    if as_json:
        print(json.dumps({**result.to_dict(), "heldout": held, "path": str(path)}))
        return
    print(
        f"best: {result.template}\n"
        f"  demonstrations J {result.initial.j:.2f} -> {result.best.j:.2f}, "
        f"FPR {result.initial.rates.fpr:.1f}% -> {result.best.rates.fpr:.1f}%"
    )
    if held:
        print(
            f"  held-out FPR {held['before']['fpr']:.1f}% -> {held['after']['fpr']:.1f}%, "
            f"TPR {held['before']['tpr']:.1f}% -> {held['after']['tpr']:.1f}%"
        )
    print(f"saved {path}")


@reward_app.command("experiment")
def experiment(
    judge: str = typer.Option("minijudge", "--judge", help="Judge spec."),
    env: list[str] = typer.Option(None, "--env", help="Tasks (default: the built-in ones)."),
    n_demonstrations: int = typer.Option(6, "--n-demonstrations"),
    n_heldout: int = typer.Option(16, "--n-heldout"),
    iterations: int = typer.Option(10, "--iterations"),
    restarts: int = typer.Option(3, "--restarts"),
    stride: int = typer.Option(2, "--stride"),
    min_tpr: float = typer.Option(
        0.0,
        "--min-tpr",
        help="Reject candidates below this demonstration TPR (percent); 0 = the paper rule.",
    ),
    out: Path = typer.Option(None, "--out", help="Write the report JSON here (atomic)."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Demo2Reward on the built-in tasks: held-out TPR/TNR/FPR/FNR before and after.

    The threshold is calibrated on the expert demonstrations with the starting instruction (as
    a user would); held-out episodes include near misses, hovering just above the target,
    reaching the wrong cube (arm_reach), blocked routes (reach_around) and random motion.
    """
    cfg = Demo2RewardConfig(
        iterations=iterations, restarts=restarts, stride=stride, min_tpr=min_tpr
    )
    report = heldout_experiment(
        load_judge(judge),
        env or BUILTIN_TASKS,
        n_demonstrations,
        n_heldout,
        cfg,
        progress=None if as_json else print,
    )
    if out is not None:
        write_json(out, report)
    print(json.dumps(report) if as_json else format_table(report))


def register(app: typer.Typer) -> None:
    """Add the ``reward`` command group to ``app``."""
    app.add_typer(reward_app, name="reward")
