"""Wilson intervals and the per-task / per-group summaries."""

from __future__ import annotations

import math

import numpy as np
import pytest

from embodied.apps.evaluation import wilson_interval
from embodied.apps.evaluation.stats import group_stats, outcome_rates, task_stats
from embodied.errors import ConfigError


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [  # reference values of the Wilson score interval at 95%
        (5, 10, 0.2366, 0.7634),
        (0, 10, 0.0, 0.2775),
        (10, 10, 0.7225, 1.0),
        (1, 3, 0.0615, 0.7923),
        (45, 50, 0.7864, 0.9565),
        (50, 50, 0.9287, 1.0),
    ],
)
def test_wilson_interval_reference_values(k: int, n: int, low: float, high: float) -> None:
    lo, hi = wilson_interval(k, n)
    assert lo == pytest.approx(low, abs=5e-5) and hi == pytest.approx(high, abs=5e-5)


def test_wilson_interval_edges_and_bad_input() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)
    lo, hi = wilson_interval(3, 3)
    assert hi == 1.0 and 0.0 < lo < 1.0
    # narrower with more trials, always containing the point estimate
    assert wilson_interval(25, 50)[1] - wilson_interval(25, 50)[0] < 0.3
    for k, n in ((4, 3), (-1, 3), (0, -1)):
        with pytest.raises(ConfigError, match=f"{k}/{n}"):
            wilson_interval(k, n)


def test_task_and_group_stats() -> None:
    a = task_stats(
        "libero:libero_goal:0",
        "libero:libero_goal",
        "default",
        "open",
        [True, True, False, True],
        [10, 12, 300, 8],
    )
    b = task_stats(
        "libero:libero_goal:1",
        "libero:libero_goal",
        "default",
        "put",
        [False, False],
        [300, 300],
        errors=1,
    )
    assert (a.n, a.successes, a.success_rate, a.mean_steps) == (4, 3, 0.75, 82.5)
    assert (a.ci_low, a.ci_high) == wilson_interval(3, 4)
    assert b.errors == 1 and b.success_rate == 0.0
    g = group_stats("libero:libero_goal", "default", [a, b])
    assert g.n_tasks == 2 and g.n == 6 and g.successes == 3
    assert g.mean_task_success == pytest.approx(0.375)  # mean of task rates (papers' number)
    assert g.success_rate == pytest.approx(0.5)  # pooled
    assert (g.ci_low, g.ci_high) == wilson_interval(3, 6)
    empty = task_stats("x:y", "x:y", "default", "", [], [])
    assert empty.n == 0 and math.isnan(empty.success_rate)


def test_boolean_outcomes_are_counted_over_all_episodes() -> None:
    """Each boolean outcome key gets count, rate over n (errored episodes included, as for
    success_rate) and its Wilson interval; other keys are not counted."""
    outcomes = [
        {"wrong_cube_reached": False, "reached": "red", "target_dist": 0.01},
        {"wrong_cube_reached": np.bool_(True), "reached": "green", "collided": False},
        {"wrong_cube_reached": False, "reached": "red"},
        {},  # an episode that could not be run
    ]
    t = task_stats(
        "mujoco:arm_reach",
        "mujoco:arm_reach",
        "default",
        "reach the red cube",
        [True, False, True, False],
        [20, 300, 25],
        errors=1,
        outcomes=outcomes,
    )
    lo, hi = wilson_interval(1, 4)
    assert t.outcome_rates == {
        "collided": {
            "count": 0,
            "rate": 0.0,
            **dict(zip(("ci_low", "ci_high"), wilson_interval(0, 4), strict=True)),
        },
        "wrong_cube_reached": {"count": 1, "rate": 0.25, "ci_low": lo, "ci_high": hi},
    }
    assert t.to_dict()["outcome_rates"]["wrong_cube_reached"]["count"] == 1
    assert (
        outcome_rates([{"wrong_cube_reached": True}] * 3, n=5)["wrong_cube_reached"]["rate"] == 0.6
    )
    assert task_stats("x:y", "x:y", "default", "", [True], [3]).outcome_rates == {}
    assert outcome_rates([{"reached": "red"}]) == {}
    with pytest.raises(ConfigError, match="one outcome per episode"):
        task_stats("x:y", "x:y", "default", "", [True, False], [3, 4], outcomes=[{}])
