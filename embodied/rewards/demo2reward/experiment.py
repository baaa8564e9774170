"""Held-out evaluation of Demo2Reward on the built-in tasks (before/after table per task).

Per task: record a few expert demos (success partway, seeds from 20000), optimise the
instruction on them, then compare the starting and the frozen instruction on held-out
episodes of every kind (expert, near misses, blocked, random; seeds from 30000) that the
optimiser never saw.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from embodied.contracts import Judge
from embodied.rewards.demo2reward.loop import Demo2RewardConfig, optimize_instruction
from embodied.rewards.demo2reward.objective import DemoSet
from embodied.rewards.demo2reward.proposers import OfflineProposer, Proposer

BUILTIN_TASKS = ("mujoco:arm_reach", "mujoco:reach_around")
DEMO_SEED0 = 20000
HELDOUT_SEED0 = 30000


def heldout_experiment(
    judge: Judge,
    env_ids: Sequence[str] = BUILTIN_TASKS,
    n_demos: int = 6,
    n_heldout: int = 16,
    config: Demo2RewardConfig | None = None,
    proposer: Proposer | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run Demo2Reward per task and report held-out rates before and after.

    Returns:
        ``{"tasks": {env_id: {"template", "demos": {before, after}, "heldout": {before,
        after}, "history"}}, "config": ...}`` with rates in percent.
    """
    from embodied.rewards.minijudge.data_minijudge import record_episodes

    cfg = config or Demo2RewardConfig(stride=2)
    out: dict[str, Any] = {
        "tasks": {},
        "config": {
            "iterations": cfg.iterations,
            "restarts": cfg.restarts,
            "stride": cfg.stride,
            "n_demos": n_demos,
            "n_heldout": n_heldout,
            "demo_seeds_from": DEMO_SEED0,
            "heldout_seeds_from": HELDOUT_SEED0,
        },
    }
    for env_id in env_ids:
        say = progress or (lambda _msg: None)
        say(f"{env_id}: recording {n_demos} demos + {n_heldout} held-out episodes")
        demos = record_episodes(env_id, n_demos, DEMO_SEED0, kinds=("expert",))
        heldout = record_episodes(env_id, n_heldout, HELDOUT_SEED0)
        say(f"{env_id}: optimising the instruction")
        result = optimize_instruction(judge, demos, proposer or OfflineProposer(), cfg)
        hs = DemoSet(heldout, cfg.n_context, cfg.stride)
        before = hs.evaluate(judge, cfg.template)
        after = hs.evaluate(judge, result.template)
        out["tasks"][env_id] = {
            "template": result.template,
            "demos": {"before": result.initial.to_dict(), "after": result.best.to_dict()},
            "heldout": {
                "before": before.to_dict(),
                "after": after.to_dict(),
                "episodes": len(heldout),
                "samples": len(hs),
            },
            "seconds": round(result.seconds, 1),
            "history": result.history,
        }
        say(
            f"{env_id}: held-out FPR {before.rates.fpr:.1f}% -> {after.rates.fpr:.1f}%, "
            f"TPR {before.rates.tpr:.1f}% -> {after.rates.tpr:.1f}%"
        )
    return out


def format_table(report: dict[str, Any]) -> str:
    """Markdown before/after table of a :func:`heldout_experiment` report."""
    lines = ["| task | instruction | TPR | TNR | FPR | FNR | J |", "|---|---|---|---|---|---|---|"]
    for env_id, row in report["tasks"].items():
        for when in ("before", "after"):
            r = row["heldout"][when]
            lines.append(
                f"| {env_id} ({when}) | {r['template']} | {r['tpr']:.1f} | "
                f"{r['tnr']:.1f} | {r['fpr']:.1f} | {r['fnr']:.1f} | {r['J']:.2f} |"
            )
    return "\n".join(lines)
