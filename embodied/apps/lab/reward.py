"""Held-out evaluation of Demo2Reward on the built-in tasks (before/after table per task).

Per task: record a few expert demonstrations (success partway, seeds from 20000), optimise
the instruction on them, then compare the starting and the frozen instruction on held-out
episodes of every kind (expert, near misses, blocked, random; seeds from 30000) that the
optimiser never saw. The held-out set holds the realistic false-positive sources: near
misses, the arm hovering just above the target, the arm reaching the WRONG cube (arm_reach),
blocked routes (reach_around) and random motion.

The judge's decision threshold is calibrated as a user would: on the demonstrations, with the
starting instruction (balanced accuracy), then kept fixed for both instructions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from embodied.apps.training.data_minijudge import record_episodes
from embodied.contracts import Judge
from embodied.rewards.calibration import best_threshold
from embodied.rewards.demo2reward.metacritic import default_proposer
from embodied.rewards.demo2reward.objective import DemonstrationSet
from embodied.rewards.demo2reward.optimization import Demo2RewardConfig, optimize_instruction
from embodied.rewards.demo2reward.proposers import Proposer

BUILTIN_TASKS = ("mujoco:arm_reach", "mujoco:reach_around")
DEMONSTRATION_SEED0 = 20000
HELDOUT_SEED0 = 30000
HELDOUT_KINDS: dict[str, tuple[str, ...]] = {
    "mujoco:arm_reach": ("expert", "wrong", "near", "hover", "random"),
    "mujoco:reach_around": ("expert", "near", "blocked", "random"),
}
"""Env id -> kinds of held-out episodes (cycled), the false-positive sources included."""


def heldout_experiment(
    judge: Judge,
    env_ids: Sequence[str] = BUILTIN_TASKS,
    n_demonstrations: int = 6,
    n_heldout: int = 16,
    config: Demo2RewardConfig | None = None,
    proposer: Proposer | None = None,
    progress: Callable[[str], None] | None = None,
    calibrate: bool = True,
) -> dict[str, Any]:
    """Run Demo2Reward per task and report held-out rates before and after.

    Args:
        judge: The judge (its threshold is restored afterwards).
        env_ids: Built-in tasks.
        n_demonstrations: Expert demonstrations per task (the optimiser's only data).
        n_heldout: Held-out episodes per task (kinds from :data:`HELDOUT_KINDS`).
        config: Demo2Reward settings.
        proposer: Instruction proposer (default: the reference Meta-Critic on the judge's
            model; a judge without one needs a proposer).
        progress: Called with progress lines.
        calibrate: Calibrate the threshold on the demonstrations with the starting instruction
            (else keep the judge's shipped threshold); never for the reference Critic, whose
            answers are binary.

    Returns:
        ``{"tasks": {env_id: {"template", "threshold", "demonstrations": {before, after}, "heldout":
        {before, after}, "history"}}, "config": ...}`` with rates in percent.
    """
    cfg = config or Demo2RewardConfig(stride=2)
    out: dict[str, Any] = {
        "tasks": {},
        "config": {
            "iterations": cfg.iterations,
            "restarts": cfg.restarts,
            "stride": cfg.stride,
            "min_tpr": cfg.min_tpr,
            "budget": cfg.budget,
            "n_demonstrations": n_demonstrations,
            "n_heldout": n_heldout,
            "demonstration_seeds_from": DEMONSTRATION_SEED0,
            "heldout_seeds_from": HELDOUT_SEED0,
        },
    }
    proposer = proposer or default_proposer(judge)
    out["config"]["proposer"] = str(getattr(proposer, "name", type(proposer).__name__))
    for env_id in env_ids:
        say = progress or (lambda _msg: None)
        say(
            f"{env_id}: recording {n_demonstrations} demonstrations + {n_heldout} held-out episodes"
        )
        demonstrations = record_episodes(
            env_id, n_demonstrations, DEMONSTRATION_SEED0, kinds=("expert",)
        )
        heldout = record_episodes(env_id, n_heldout, HELDOUT_SEED0, kinds=HELDOUT_KINDS.get(env_id))
        shipped = float(getattr(judge, "threshold", 0.5))
        threshold = shipped
        if calibrate and getattr(judge, "critique", None) is None:
            # the reference Critic answers 1/0: it has no threshold to calibrate
            ds = DemonstrationSet(demonstrations, cfg.n_context, cfg.stride)
            threshold = best_threshold(ds.score(judge, cfg.template), ds.labels)
        say(f"{env_id}: optimising the instruction (threshold {threshold:.3f})")
        try:
            judge.threshold = threshold  # type: ignore[attr-defined]
            result = optimize_instruction(judge, demonstrations, proposer, cfg)
            hs = DemonstrationSet(heldout, cfg.n_context, cfg.stride)
            before = hs.evaluate(judge, cfg.template)
            after = hs.evaluate(judge, result.template)
        finally:
            judge.threshold = shipped  # type: ignore[attr-defined]
        out["tasks"][env_id] = {
            "template": result.template,
            "threshold": threshold,
            "heldout_kinds": list(HELDOUT_KINDS.get(env_id, ())),
            "demonstrations": {
                "before": result.initial.to_dict(),
                "after": result.best.to_dict(),
            },
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
