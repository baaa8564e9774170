"""PAC confidence sets: Weissman L1 coverage, 1/sqrt(n) shrinkage, union bound, worst cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from controllers.shield.pac import IntervalModel, L1Ball, TransitionCounts, l1_radius
from embodied.errors import ConfigError
from tests.conftest import require


def test_l1_ball_covers_the_true_distribution_with_the_promised_confidence() -> None:
    """delta = 0.1: p lies in the ball around p_hat in >= 90 % of 500 sampled datasets."""
    rng = np.random.default_rng(0)
    p = np.array([0.5, 0.3, 0.15, 0.05])
    n, delta = 200, 0.1
    eps = float(l1_radius(n, len(p), delta))
    assert 0.0 < eps < 2.0  # a real, non-vacuous ball
    deviations = np.array(
        [np.abs(rng.multinomial(n, p) / n - p).sum() for _ in range(500)], dtype=np.float64
    )
    coverage = float((deviations <= eps).mean())
    assert coverage >= 0.9, (coverage, eps)
    # the bound is the Weissman formula, written with the log-sum: ln(2^k - 2) - ln(delta)
    assert eps == pytest.approx(math.sqrt(2.0 / n * (math.log(2**4 - 2) - math.log(delta))))


def test_radius_shrinks_like_one_over_sqrt_n_and_never_overflows() -> None:
    eps = l1_radius(np.array([100, 400, 1600, 0]), 6, 0.01)
    assert eps[1] / eps[0] == pytest.approx(0.5) and eps[2] / eps[1] == pytest.approx(0.5)
    assert eps[3] == 2.0  # unvisited: the whole simplex
    big = l1_radius(10**9, 5000, 1e-6)  # 2^5000 overflows a float; the log-sum does not
    assert np.isfinite(big) and 0.0 < big < 2.0
    with pytest.raises(ConfigError):
        l1_radius(10, 3, 0.0)


def test_union_bound_splits_delta_over_all_state_action_pairs() -> None:
    counts = TransitionCounts(3, 2)
    counts.add(0, 1, 2, times=50)
    counts.add(0, 1, 0, times=50)
    radii = counts.radii(0.06)
    assert radii[0, 1] == pytest.approx(float(l1_radius(100, 3, 0.06 / 6)))
    assert (radii[np.arange(3) != 0] == 2.0).all() and radii[0, 0] == 2.0
    np.testing.assert_allclose(counts.estimate()[0, 1], [0.5, 0.0, 0.5])


def _lp_l1_min(p: np.ndarray, eps: float, v: np.ndarray) -> float:
    """min v.x s.t. x in simplex, ||x - p||_1 <= eps, as a linear program (x = p + u - w)."""
    linprog = require("scipy.optimize").linprog
    k = len(p)
    cost = np.concatenate([v, -v])
    a_eq = np.concatenate([np.ones(k), -np.ones(k)])[None]  # sum x = 1
    a_ub = np.vstack([np.ones(2 * k)[None], np.hstack([-np.eye(k), np.eye(k)])])
    b_ub = np.concatenate([[eps], p])  # sum(u + w) <= eps; x = p + u - w >= 0
    res = linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=[0.0], bounds=(0, None))
    assert res.status == 0, res.message
    return float(p @ v + res.fun)


def test_worst_case_over_the_l1_ball_matches_a_linear_program() -> None:
    rng = np.random.default_rng(1)
    for _ in range(50):
        k = int(rng.integers(2, 7))
        p = rng.dirichlet(np.ones(k))
        eps = float(rng.uniform(0.0, 2.0))
        v = rng.random(k)
        ball = L1Ball(p[None, None, :], np.array([[eps]]))
        got = float(ball.worst_expectation(v)[0, 0])
        assert got == pytest.approx(_lp_l1_min(p, eps, v), abs=1e-7)
        # the interval relaxation contains the ball, so its worst case is no better
        worst_interval = float(IntervalModel.from_l1(ball).worst_expectation(v)[0, 0])
        assert worst_interval <= got + 1e-12


def test_interval_worst_case_pours_slack_into_the_lowest_values() -> None:
    lower = np.array([[[0.2, 0.1, 0.3]]])
    upper = np.array([[[0.6, 0.5, 0.4]]])
    v = np.array([1.0, 0.0, 0.5])
    # slack 0.4: to outcome 1 (value 0) up to +0.4 -> x = (0.2, 0.5, 0.3)
    got = IntervalModel(lower, upper).worst_expectation(v)[0, 0]
    assert got == pytest.approx(0.2 * 1.0 + 0.5 * 0.0 + 0.3 * 0.5)
