"""Success statistics: Wilson score intervals, per-task and per-group summaries."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

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


def task_stats(
    env_id: str,
    group: str,
    variant: str,
    instruction: str,
    successes: Sequence[bool],
    steps: Sequence[int],
    errors: int = 0,
) -> TaskStats:
    """Summarise one (task, variant) from its episodes' success flags and lengths.

    Args:
        successes: One flag per episode, False for an episode that could not be run.
        steps: Lengths of the episodes that ran.
        errors: How many of the episodes could not be run.
    """
    n, k = len(successes), int(sum(bool(s) for s in successes))
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
