"""The Demo2Reward loop: tune a judge's instruction on a few labelled demonstrations, no
training.

As the reference (https://github.com/cgumbsch/Demo2Reward ``demo2reward.py: main``): each
repeat starts from :data:`DEFAULT_TEMPLATE`; for K iterations (100) the proposer (the
Meta-Critic by default) writes a new template from the current best, its TPR/TNR/FPR/FNR and
the first 5 of its misclassified clips after a shuffle (``random.shuffle(best_fails)``); the
candidate is kept only if J = 0.01 * TPR + TNR strictly improves (``score > best_score``);
5 repeats, each with its own seed. Departure: the reference reports every repeat's result
separately; here each repeat's best is kept in :attr:`OptimizationResult.repeats` and the
best over repeats is frozen.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from embodied.config import checked, validate
from embodied.contracts import Judge
from embodied.errors import ConfigError
from embodied.io import read_json_file, write_json
from embodied.rewards.clips import format_instruction
from embodied.rewards.demo2reward.demonstrations import LabelledDemonstration
from embodied.rewards.demo2reward.metacritic import default_proposer
from embodied.rewards.demo2reward.objective import DemonstrationSet, Evaluation
from embodied.rewards.demo2reward.proposers import (
    DEFAULT_TEMPLATE,
    ProposalContext,
    Proposer,
)

MIN_DEMONSTRATIONS, MAX_DEMONSTRATIONS = 3, 10


@dataclass
class Demo2RewardConfig:
    """Settings of :func:`optimize_instruction`.

    Args:
        template: Starting instruction template (must contain ``{task}``); default the
            reference's generic instruction in its default (simulated-robot) wording,
            :data:`DEFAULT_TEMPLATE`. For a real robot (the reference's ``--real_robot``) pass
            :data:`~embodied.rewards.demo2reward.proposers.REAL_ROBOT_TEMPLATE` ("this robot")
            and build the Critic/Meta-Critic with ``real_robot=True``.
        iterations: Proposals per restart (K); the reference's ``--max_iter`` default, 100.
        restarts: Independent repeats from the starting template, each with its own seed; the
            reference's ``--num_repeats`` default, 5.
        budget: Most proposals over all repeats (each one Meta-Critic call and one Critic
            evaluation of the candidate); None: ``iterations * restarts`` (the reference's
            500). A smaller budget ends the run early (the last repeat may be cut short).
        seed: Base seed.
        max_misclassified: Misclassified clips shown to the proposer (<= 5; reference 5),
            drawn after a shuffle of all of the current best's misclassified clips.
        n_context: Most earlier frames per sample (the reference's ``--past_len``, 4; the
            reference's frame indices, ``demonstrations.sample_indices``).
        stride: Use every ``stride``-th frame of each demonstration as a sample.
        min_tpr: TPR floor in percent: a candidate whose TPR on the demonstrations falls below
            it is rejected even if J improves. 0 (default) is the paper's rule; J weighs TPR by
            0.01, so without a floor the loop may trade most true positives for the last
            false positive. Users who need the reward to fire set e.g. 80.
    """

    template: str = DEFAULT_TEMPLATE
    config_name: ClassVar[str] = "demo2reward"

    iterations: int = checked(100, ge=1, fix="use e.g. 100")
    restarts: int = checked(5, ge=1, fix="use e.g. 5")
    budget: int | None = checked(None, ge=1, fix="use >= 1 proposal, or None")
    seed: int = 0
    max_misclassified: int = checked(5, ge=0, le=5, fix="use 0..5")
    n_context: int = 4
    stride: int = checked(1, ge=1, fix="use stride >= 1")
    min_tpr: float = checked(0.0, ge=0, le=100, fix="use a percentage in [0, 100], e.g. 80")

    def __post_init__(self) -> None:
        format_instruction(self.template, "check")  # raises on a template without {task}
        validate(self)


@dataclass
class OptimizationResult:
    """The frozen instruction and how it was found."""

    template: str
    best: Evaluation
    initial: Evaluation
    history: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    repeats: list[dict[str, Any]] = field(default_factory=list)
    proposer: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable summary (``repeats``: each repeat's best, as the reference
        reports them)."""
        return {
            "template": self.template,
            "best": self.best.to_dict(),
            "initial": self.initial.to_dict(),
            "repeats": self.repeats,
            "proposer": self.proposer,
            "history": self.history,
            "seconds": round(self.seconds, 2),
        }


def optimize_instruction(
    judge: Judge,
    demonstrations: Sequence[LabelledDemonstration],
    proposer: Proposer | None = None,
    config: Demo2RewardConfig | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> OptimizationResult:
    """Run Demo2Reward on ``demonstrations`` and return the best template.

    Args:
        judge: The judge whose instruction is tuned (its threshold stays fixed).
        demonstrations: 3 to 10 labelled demonstrations with both failure and success frames.
        proposer: Writes candidate templates (default: the reference Meta-Critic on the
            judge's own image-text-to-text model, as the reference's single-model mode).
        config: Loop settings.
        progress: Called with each history row (CLIs print it).

    Raises:
        ConfigError: fewer than 3 or more than 10 demonstrations, all-one-class labels, a
            template without ``{task}``, or no proposer and a judge without a VLM to share.
    """
    cfg = config or Demo2RewardConfig()
    proposer = proposer or default_proposer(judge)
    t0 = time.perf_counter()
    ds = DemonstrationSet(
        demonstrations, cfg.n_context, cfg.stride, MIN_DEMONSTRATIONS, MAX_DEMONSTRATIONS
    )
    tasks = sorted({d.task for d in demonstrations})
    cache: dict[str, Evaluation] = {}

    def evaluate(template: str) -> Evaluation:
        # every misclassified sample is kept (the reference's failure_cases); the Critic is
        # deterministic (greedy), so a template is scored once
        if template not in cache:
            cache[template] = ds.evaluate(judge, template)
        return cache[template]

    initial = evaluate(cfg.template)
    history: list[dict[str, Any]] = [
        {"restart": -1, "iteration": 0, "accepted": True, **initial.to_dict()}
    ]
    if progress:
        progress(history[-1])
    best = initial
    repeats: list[dict[str, Any]] = []
    left = cfg.iterations * cfg.restarts if cfg.budget is None else cfg.budget
    for restart in range(cfg.restarts):
        if left <= 0:
            break
        rng = np.random.default_rng(cfg.seed * 1000 + restart)
        current = initial
        for it in range(1, cfg.iterations + 1):
            if left <= 0:
                break
            left -= 1
            # random.shuffle(best_fails), then refine_prompt shows fails[:num_fails]
            order = rng.permutation(len(current.misclassified))
            shown = [current.misclassified[int(i)] for i in order[: cfg.max_misclassified]]
            ctx = ProposalContext(
                current.template,
                current.rates,
                current.j,
                shown,
                tasks,
                it,
                rng,
                set(cache),
                ds.demonstrations,
            )
            candidate = proposer.propose(ctx)
            format_instruction(candidate, "check")
            ev = evaluate(candidate)
            accepted = ev.j > current.j and ev.rates.tpr >= cfg.min_tpr
            if accepted:
                current = ev
            history.append(
                {"restart": restart, "iteration": it, "accepted": accepted, **ev.to_dict()}
            )
            if progress:
                progress(history[-1])
        repeats.append({"restart": restart, **current.to_dict()})
        if current.j > best.j:
            best = current
    return OptimizationResult(
        best.template,
        best,
        initial,
        history,
        time.perf_counter() - t0,
        repeats,
        str(getattr(proposer, "name", type(proposer).__name__)),
    )


def save_result(
    result: OptimizationResult,
    out: str | os.PathLike[str],
    judge_info: dict[str, Any],
    table: list[dict[str, float]],
    heldout: dict[str, Any] | None = None,
) -> Path:
    """Atomically write ``instruction.json`` (template, rates, calibration table, history).

    Args:
        result: The optimisation result.
        out: Output folder.
        judge_info: The judge's description (backend, model, threshold).
        table: Calibration table of the frozen template on the optimisation demonstrations.
        heldout: Optional before/after rates on held-out demonstrations.
    """
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "instruction.json"
    write_json(
        path,
        {
            "instruction": result.template,
            "objective": "J = 0.01 * TPR + TNR (percent)",
            "judge": judge_info,
            "calibration_table": table,
            "heldout": heldout or {},
            **result.to_dict(),
        },
    )
    return path


def load_instruction(path: str | os.PathLike[str]) -> str:
    """The frozen template from an ``instruction.json`` (or the folder holding it)."""
    p = Path(path)
    p = p / "instruction.json" if p.is_dir() else p
    if not p.exists():
        raise ConfigError(
            f"no instruction file at {str(p)!r}",
            fix="run `embodied lab reward optimize --out DIR` first",
        )
    fix = "re-run `embodied lab reward optimize --out DIR` (the file is damaged)"
    data = read_json_file(p, what="Demo2Reward instruction", fix=fix, error=ConfigError)
    template = data.get("instruction", "")
    try:
        format_instruction(template, "check")
    except ConfigError as exc:  # no template, or one without {task}: say which file
        raise ConfigError(f"Demo2Reward instruction {str(p)!r}: {exc.message}", fix=fix) from exc
    return str(template)
