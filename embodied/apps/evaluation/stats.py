"""Success statistics: Wilson score intervals, per-task and per-group summaries."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from embodied.errors import ConfigError

Z95 = 1.959963984540054
"""Two-sided 95% normal quantile."""


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion.

    Args:
        successes: Number of successes (0..n).
        n: Number of trials; ``n == 0`` gives the uninformative (0, 1).
        z: Normal quantile (1.96 for 95%).

    Returns:
        (low, high) bounds in [0, 1].
    """
    if n < 0 or not 0 <= successes <= max(n, 0):
        raise ConfigError(f"wilson_interval needs 0 <= successes <= n, got {successes}/{n}")
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    low = 0.0 if successes == 0 else max(0.0, center - half)
    high = 1.0 if successes == n else min(1.0, center + half)
    return low, high


@dataclass(frozen=True)
class TaskStats:
    """Success of one (task, variant).

    Attributes:
        env_id: The task's env id.
        group: Its averaging group (suite).
        variant: Variant name.
        instruction: Task instruction.
        n: Episodes, including those that could not be run (counted as failures).
        successes: Successful episodes.
        success_rate: successes / n.
        ci_low: Wilson 95% lower bound.
        ci_high: Wilson 95% upper bound.
        mean_steps: Mean episode length in control steps (episodes that ran).
        errors: Episodes that raised or could not be run (worker died ``max_retries + 1``
            times); included in ``n`` as failures.
        outcome_rates: For every boolean outcome key in the episodes' records (e.g.
            arm_reach's ``wrong_cube_reached``), ``{"count": episodes where it is True,
            "rate": count / n, "ci_low", "ci_high": its Wilson 95% interval}``, over the same
            ``n`` as ``success_rate`` (an episode that could not be run counts as False).
            Empty when no episode reported a boolean outcome.
    """

    env_id: str
    group: str
    variant: str
    instruction: str
    n: int
    successes: int
    success_rate: float
    ci_low: float
    ci_high: float
    mean_steps: float
    errors: int = 0
    outcome_rates: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)


@dataclass(frozen=True)
class GroupStats:
    """Success of one (group, variant), e.g. a LIBERO suite.

    Attributes:
        group: Group name.
        variant: Variant name.
        n_tasks: Tasks in the group.
        n: Episodes in the group.
        successes: Successful episodes.
        mean_task_success: Mean of the per-task success rates (the papers' suite number).
        success_rate: Pooled success rate over all episodes.
        ci_low: Wilson 95% lower bound of the pooled rate.
        ci_high: Wilson 95% upper bound of the pooled rate.
    """

    group: str
    variant: str
    n_tasks: int
    n: int
    successes: int
    mean_task_success: float
    success_rate: float
    ci_low: float
    ci_high: float

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)


def outcome_rates(
    outcomes: Sequence[Mapping[str, Any]], n: int | None = None
) -> dict[str, dict[str, float]]:
    """Rate and Wilson 95% interval of every boolean outcome key.

    Args:
        outcomes: One outcome mapping per episode (``EpisodeRecord.outcome``; empty for an
            episode that could not be run).
        n: Episodes the rates are over (default ``len(outcomes)``).

    Returns:
        Key -> ``{"count", "rate", "ci_low", "ci_high"}`` for every key whose value is a
        bool (or ``np.bool_``) in at least one episode, sorted by key; an episode without
        the key, or with a non-bool value, counts as False.
    """
    n = len(outcomes) if n is None else n
    keys = sorted({k for o in outcomes for k, v in o.items() if _is_bool(v)})
    out: dict[str, dict[str, float]] = {}
    for key in keys:
        count = sum(1 for o in outcomes if _is_bool(o.get(key)) and bool(o[key]))
        lo, hi = wilson_interval(count, n)
        out[key] = {
            "count": count,
            "rate": count / n if n else float("nan"),
            "ci_low": lo,
            "ci_high": hi,
        }
    return out


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool | np.bool_)


def task_stats(
    env_id: str,
    group: str,
    variant: str,
    instruction: str,
    successes: Sequence[bool],
    steps: Sequence[int],
    errors: int = 0,
    outcomes: Sequence[Mapping[str, Any]] = (),
) -> TaskStats:
    """Summarise one (task, variant) from its episodes' success flags and lengths.

    Args:
        successes: One flag per episode, False for an episode that could not be run.
        steps: Lengths of the episodes that ran.
        errors: How many of the episodes could not be run.
        outcomes: One outcome mapping per episode (``EpisodeRecord.outcome``), or empty for
            none; boolean keys give :attr:`TaskStats.outcome_rates` over the same n.

    Raises:
        ConfigError: ``outcomes`` given with another length than ``successes``.
    """
    n, k = len(successes), int(sum(bool(s) for s in successes))
    if outcomes and len(outcomes) != n:
        raise ConfigError(
            f"task_stats needs one outcome per episode, got {len(outcomes)} for {n} episodes"
        )
    lo, hi = wilson_interval(k, n)
    return TaskStats(
        env_id=env_id,
        group=group,
        variant=variant,
        instruction=instruction,
        n=n,
        successes=k,
        success_rate=k / n if n else float("nan"),
        ci_low=lo,
        ci_high=hi,
        mean_steps=sum(steps) / len(steps) if steps else float("nan"),
        errors=errors,
        outcome_rates=outcome_rates(outcomes, n) if outcomes else {},
    )


def group_stats(group: str, variant: str, tasks: Sequence[TaskStats]) -> GroupStats:
    """Average the tasks of one (group, variant)."""
    n = sum(t.n for t in tasks)
    k = sum(t.successes for t in tasks)
    rates = [t.success_rate for t in tasks if t.n]
    lo, hi = wilson_interval(k, n)
    return GroupStats(
        group=group,
        variant=variant,
        n_tasks=len(tasks),
        n=n,
        successes=k,
        mean_task_success=sum(rates) / len(rates) if rates else float("nan"),
        success_rate=k / n if n else float("nan"),
        ci_low=lo,
        ci_high=hi,
    )
