"""Demo2Reward's objective: J(I) = 0.01 * TPR + TNR (percent) of a judge on labelled
demonstrations.

Every frame of every demonstration is a sample: the clip of up to 4 earlier frames and the
current one that the reference builds (``utils/images.py: past_frames_single_video``, see
:func:`~embodied.rewards.demo2reward.demonstrations.sample_indices`; fewer frames for the first
three); false positives dominate J (the reference's default objective,
``extreme_weighted_sum_rates`` in ``utils/evaluate_prompts.py``). A judge with ``critique``
(the reference Critic) decides by its binary answer and an invalid answer counts as wrong
(``utils/critic.py: _eval_split``); any other judge decides at its calibrated threshold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from embodied.contracts import Judge
from embodied.errors import ConfigError
from embodied.rewards.calibration import Rates, calibration_table, rates
from embodied.rewards.clips import format_instruction
from embodied.rewards.demo2reward.demonstrations import (
    PAST_LEN,
    LabelledDemonstration,
    sample_indices,
)

TPR_WEIGHT = 0.01
"""Weight of the TPR in J; the TNR has weight 1."""


def objective(r: Rates) -> float:
    """J = 0.01 * TPR + TNR (both in percent)."""
    return TPR_WEIGHT * r.tpr + r.tnr


@dataclass
class Misclassified:
    """A sample the judge got wrong (for the proposer).

    Attributes:
        demonstration: Index of the demonstration in the set.
        step: Frame index of the sample.
        label: Ground truth.
        prob: The judge's score (NaN: the Critic's answer was invalid).
        task: The demonstration's task.
        output: The judge's output as shown to the Meta-Critic: the reference Critic's parsed
            answer, else the decision "1"/"0".
        frames: The demonstration's frames (shared, not copied), for :attr:`clip`.
        n_context: Most earlier frames in :attr:`clip` (the reference's ``--past_len``).
    """

    demonstration: int
    step: int
    label: bool
    prob: float
    task: str
    output: str = ""
    frames: np.ndarray | None = field(default=None, repr=False)
    n_context: int = PAST_LEN

    @property
    def clip(self) -> np.ndarray | None:
        """The clip the judge saw (the reference's sample: up to ``n_context`` earlier frames
        + the current one, :func:`~embodied.rewards.demo2reward.demonstrations.sample_indices`)."""
        if self.frames is None:
            return None
        return self.frames[sample_indices(self.step, self.n_context)]

    def describe(self) -> str:
        """One line for a text prompt."""
        kind = "false positive" if not self.label else "false negative"
        return (
            f"demonstration {self.demonstration} frame {self.step} ({self.task}): {kind}, "
            f"judge said p={self.prob:.2f}, truth: {'success' if self.label else 'not yet success'}"
        )


@dataclass
class Evaluation:
    """A template's results on a demonstration set."""

    template: str
    rates: Rates
    j: float
    probs: np.ndarray = field(repr=False)
    labels: np.ndarray = field(repr=False)
    misclassified: list[Misclassified] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """Rates, J, the template and the number of invalid Critic answers (no arrays)."""
        invalid = int(np.isnan(self.probs).sum()) if self.probs.size else 0
        return {"template": self.template, "J": self.j, **self.rates.to_dict(), "invalid": invalid}


class DemonstrationSet:
    """Labelled demonstrations scored sample by sample.

    Args:
        demonstrations: The demonstrations (3 to 10 for optimisation; any number for
            evaluation).
        n_context: Most earlier frames per sample (the reference's ``--past_len``, 4); a
            judge with a fixed number of frames resamples the shorter first clips.
        stride: Use every ``stride``-th frame as a sample (1 = every frame).
        min_demonstrations: Fewest demonstrations accepted.
        max_demonstrations: Most demonstrations accepted (None: no limit).
    """

    def __init__(
        self,
        demonstrations: Sequence[LabelledDemonstration],
        n_context: int = PAST_LEN,
        stride: int = 1,
        min_demonstrations: int = 1,
        max_demonstrations: int | None = None,
    ) -> None:
        n, low, high = len(demonstrations), min_demonstrations, max_demonstrations
        if n < low or (high is not None and n > high):
            raise ConfigError(
                f"got {n} demonstrations; Demo2Reward takes {low} to {high}",
                fix="pass between 3 and 10 labelled demonstrations",
            )
        if stride < 1:
            raise ConfigError(f"stride must be >= 1, got {stride}")
        self.demonstrations = list(demonstrations)
        self.n_context = n_context
        self.steps = [list(range(0, len(d), stride)) for d in self.demonstrations]
        self.labels = np.concatenate(
            [d.labels[s] for d, s in zip(self.demonstrations, self.steps, strict=False)]
        )
        if self.labels.all() or not self.labels.any():
            raise ConfigError(
                f"demonstration labels are all {'positive' if self.labels.all() else 'negative'}",
                fix="use demonstrations that reach success partway (failure and success frames)",
            )

    def __len__(self) -> int:
        return int(self.labels.size)

    def score(self, judge: Judge, template: str) -> np.ndarray:
        """Judge probabilities of every sample with ``template`` filled per demonstration's task."""
        out = []
        for d, steps in zip(self.demonstrations, self.steps, strict=False):
            text = format_instruction(template, d.task)
            clips = d.sample_clips(self.n_context, steps)
            batch = getattr(judge, "score_batch", None)
            if batch is not None:
                out.append(np.asarray(batch(clips, text), dtype=np.float64))
            else:
                out.append(np.array([judge.score(c, text) for c in clips], dtype=np.float64))
        return np.concatenate(out)

    def answers(self, judge: Judge, template: str) -> tuple[np.ndarray, list[str] | None]:
        """Scores of every sample and, for a judge with ``critique`` (the reference Critic),
        its outputs (scores 1/0, NaN for an invalid answer); else ``(score(...), None)``."""
        critique = getattr(judge, "critique", None)
        if critique is None:
            return self.score(judge, template), None
        values, outputs = [], []
        for d, steps in zip(self.demonstrations, self.steps, strict=False):
            clips = d.sample_clips(self.n_context, steps)
            v, o = critique(clips, format_instruction(template, d.task))
            values.append(np.asarray(v, dtype=np.float64))
            outputs += list(o)
        return np.concatenate(values), outputs

    def evaluate(
        self,
        judge: Judge,
        template: str,
        threshold: float | None = None,
        max_wrong: int | None = None,
        seed: int = 0,
    ) -> Evaluation:
        """Rates, J and the misclassified samples.

        Decisions: the judge's score at its threshold; an invalid reference-Critic answer
        (NaN) is wrong whatever the label (a false negative on a positive, a false positive on
        a negative), as in the reference.

        Args:
            judge: The judge.
            template: Instruction template.
            threshold: Decision threshold (default: the judge's).
            max_wrong: None (default): every misclassified sample, in sample order (the
                reference keeps them all and shuffles before showing five); else at most this
                many, false positives first, drawn with ``seed``.
            seed: Seed of the ``max_wrong`` draw.
        """
        thr = float(getattr(judge, "threshold", 0.5) if threshold is None else threshold)
        probs, outputs = self.answers(judge, template)
        invalid = np.isnan(probs)
        decisions = np.where(invalid, ~self.labels, np.nan_to_num(probs, nan=0.0) >= thr)
        r = rates(decisions, self.labels)
        wrong = np.flatnonzero(decisions != self.labels)
        if max_wrong is None:
            pick = [int(i) for i in wrong]
        else:
            rng = np.random.default_rng(seed)
            fps = [i for i in wrong if not self.labels[i]]
            fns = [i for i in wrong if self.labels[i]]
            pick = list(rng.permutation(fps))[:max_wrong]
            pick += list(rng.permutation(fns))[: max(0, max_wrong - len(pick))]
        return Evaluation(
            template,
            r,
            objective(r),
            probs,
            self.labels,
            [
                self._misclassified(
                    int(i),
                    float(probs[i]),
                    outputs[i] if outputs is not None else str(int(decisions[i])),
                )
                for i in pick
            ],
        )

    def _misclassified(self, flat: int, prob: float, output: str = "") -> Misclassified:
        for d_idx, steps in enumerate(self.steps):
            if flat < len(steps):
                demonstration = self.demonstrations[d_idx]
                step = steps[flat]
                return Misclassified(
                    d_idx,
                    step,
                    bool(demonstration.labels[step]),
                    prob,
                    demonstration.task,
                    output,
                    demonstration.frames,
                    self.n_context,
                )
            flat -= len(steps)
        raise IndexError(flat)

    def table(self, judge: Judge, template: str) -> list[dict[str, float]]:
        """Calibration table (rates per threshold) of ``template`` on these demonstrations."""
        return calibration_table(self.score(judge, template), self.labels)
