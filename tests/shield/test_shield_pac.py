"""PAC confidence sets: Weissman L1 coverage (fixed n and adaptive), union bounds, worst cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from controllers.shield.pac import BOUNDS, IntervalModel, L1Ball, TransitionCounts, l1_radius
from embodied.errors import ConfigError
from tests.conftest import require


def test_l1_ball_covers_the_true_distribution_with_the_promised_confidence() -> None:
    """delta = 0.1, n = 200 fixed in advance (where the fixed-n bound is valid): p lies in the
    ball around p_hat in >= 90 % of 500 sampled datasets."""
    rng = np.random.default_rng(0)
    p = np.array([0.5, 0.3, 0.15, 0.05])
    n, delta = 200, 0.1
    eps = float(l1_radius(n, len(p), delta, bound="fixed_n"))
    assert 0.0 < eps < 2.0  # a real, non-vacuous ball
    deviations = np.array(
        [np.abs(rng.multinomial(n, p) / n - p).sum() for _ in range(500)], dtype=np.float64
    )
    coverage = float((deviations <= eps).mean())
    assert coverage >= 0.9, (coverage, eps)
    # the bound is the Weissman formula, written with the log-sum: ln(2^k - 2) - ln(delta)
    assert eps == pytest.approx(math.sqrt(2.0 / n * (math.log(2**4 - 2) - math.log(delta))))


def test_radius_shrinks_like_one_over_sqrt_n_and_never_overflows() -> None:
    eps = l1_radius(np.array([100, 400, 1600, 0]), 6, 0.01, bound="fixed_n")
    assert eps[1] / eps[0] == pytest.approx(0.5) and eps[2] / eps[1] == pytest.approx(0.5)
    assert eps[3] == 2.0  # unvisited: the whole simplex
    for bound in BOUNDS:
        big = l1_radius(10**9, 5000, 1e-6, bound=bound)  # 2^5000 overflows; the log-sum not
        assert np.isfinite(big) and 0.0 < big < 2.0
        assert l1_radius(0, 4, 0.1, bound=bound) == 2.0
    with pytest.raises(ConfigError):
        l1_radius(10, 3, 0.0)
    with pytest.raises(ConfigError, match="bound"):
        l1_radius(10, 3, 0.1, bound="fixed")


def test_anytime_radius_is_the_fixed_n_radius_at_delta_split_over_n() -> None:
    """eps_anytime(n) = eps_fixed_n(n) at delta_sa * 6 / (pi^2 n^2), whose sum over n is
    delta_sa; and it is strictly wider than the fixed-n radius at every n >= 1."""
    n = np.array([1, 2, 3, 10, 57, 200, 10**4, 10**6])
    for k, delta_sa in ((2, 0.2), (4, 0.05), (25, 0.05 / 125)):
        anytime = l1_radius(n, k, delta_sa)  # the default
        assert anytime.tolist() == l1_radius(n, k, delta_sa, bound="anytime").tolist()
        per_n = [
            float(l1_radius(m, k, delta_sa * 6.0 / (math.pi**2 * m**2), bound="fixed_n")) for m in n
        ]
        np.testing.assert_allclose(anytime, per_n, rtol=1e-12)
        closed_form = [  # the module docstring's formula, uncapped, where it is < 2
            math.sqrt(
                2.0
                / m
                * (math.log(2**k - 2) - math.log(delta_sa) + math.log(math.pi**2 * m**2 / 6))
            )
            for m in n
        ]
        np.testing.assert_allclose(anytime, np.minimum(closed_form, 2.0), rtol=1e-12)
        every_n = np.arange(1, 5001)
        wide, narrow = (
            l1_radius(every_n, k, delta_sa),
            l1_radius(every_n, k, delta_sa, bound="fixed_n"),
        )
        below_cap = narrow < 2.0  # where the fixed-n ball is not yet the whole simplex
        assert below_cap.any() and (wide[below_cap] > narrow[below_cap]).all()
        assert (wide >= narrow).all()
    # the split sums to delta_sa: sum 6 / (pi^2 n^2) = 1
    assert sum(6.0 / (math.pi**2 * m**2) for m in range(1, 10**6)) == pytest.approx(1.0, abs=1e-6)


def test_union_bound_splits_delta_over_all_state_action_pairs() -> None:
    counts = TransitionCounts(3, 2)
    counts.add(0, 1, 2, times=50)
    counts.add(0, 1, 0, times=50)
    radii = counts.radii(0.06)
    assert radii[0, 1] == pytest.approx(float(l1_radius(100, 3, 0.06 / 6, bound="anytime")))
    fixed = counts.radii(0.06, bound="fixed_n")
    assert fixed[0, 1] == pytest.approx(float(l1_radius(100, 3, 0.06 / 6, bound="fixed_n")))
    assert fixed[0, 1] < radii[0, 1]
    np.testing.assert_array_equal(counts.l1_ball(0.06, bound="fixed_n").eps, fixed)
    np.testing.assert_array_equal(counts.l1_ball(0.06).eps, radii)
    half = counts.intervals(0.06, bound="fixed_n").upper[0, 1] - counts.estimate()[0, 1]
    np.testing.assert_allclose(half[[0, 2]], fixed[0, 1] / 2.0)
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


# ---- coverage under adaptive collection ------------------------------------------------------


def _binomial_tail(successes: int, trials: int, prob: float) -> float:
    """``P(Binomial(trials, prob) >= successes)``, summed exactly in log space."""
    log_p, log_q = math.log(prob), math.log1p(-prob)
    terms = [
        math.lgamma(trials + 1) - math.lgamma(i + 1) - math.lgamma(trials - i + 1)
        + i * log_p + (trials - i) * log_q
        for i in range(successes, trials + 1)
    ]  # fmt: skip
    return math.fsum(math.exp(t) for t in terms)


def _adaptive_failure_count(
    p: np.ndarray, radius: np.ndarray, *, runs: int, low: float, seed: int
) -> int:
    """Runs in which the true ``p`` was ever outside the ball, read after every sample.

    Each run draws successors one at a time and checks ``||p_hat_n - p||_1 <= radius[n-1]``
    after every sample ``n = 1 .. len(radius)``; it stops early, a data-dependent stopping
    rule like the shield's blocking, the first time ``p_hat``'s mass on outcome 0 (the "safe"
    successor) looks small: below ``low`` after at least 10 samples. Vectorised over runs.
    """
    rng = np.random.default_rng(seed)
    n_max, k = len(radius), len(p)
    draws = rng.choice(k, size=(runs, n_max), p=p)
    n = np.arange(1, n_max + 1)
    p_hat = np.cumsum(np.eye(k)[draws], axis=1) / n[None, :, None]  # (runs, n_max, k)
    deviation = np.abs(p_hat - p).sum(axis=2)
    looks_bad = (p_hat[:, :, 0] < low) & (n >= 10)
    stop = np.where(looks_bad.any(axis=1), looks_bad.argmax(axis=1) + 1, n_max)
    read = n[None, :] <= stop[:, None]  # the checks made before stopping
    assert 0 < (stop < n_max).sum() < runs  # the stopping rule does bite, but not always
    return int(((deviation > radius[None, :]) & read).any(axis=1).sum())


ALPHA = 1e-6
"""One-sided binomial test level: a true bound fails the coverage assertion w.p. <= ALPHA."""


@pytest.mark.parametrize(
    ("p", "n_max", "low"),
    [(np.array([0.7, 0.15, 0.1, 0.05]), 200, 0.55), (np.array([0.5, 0.5]), 1000, 0.4)],
)
def test_anytime_ball_covers_under_adaptive_collection_and_wrong_radii_are_caught(
    p: np.ndarray, n_max: int, low: float
) -> None:
    """delta = delta_sa = 0.2, 2000 runs, the ball read after every sample with early stopping:
    the anytime ball is never missed more often than delta allows (one-sided binomial test at
    1e-6, so it cannot flake while the bound is true), and the same test rejects a wrong,
    too-narrow radius (eps/4), so it can fail."""
    runs, delta = 2000, 0.2
    n = np.arange(1, n_max + 1)
    anytime = l1_radius(n, len(p), delta)
    failures = _adaptive_failure_count(p, anytime, runs=runs, low=low, seed=0)
    assert _binomial_tail(failures, runs, delta) > ALPHA, (failures, runs)
    wrong = _adaptive_failure_count(p, anytime / 4.0, runs=runs, low=low, seed=0)
    assert wrong > runs * delta and _binomial_tail(wrong, runs, delta) < ALPHA, (wrong, runs)


def test_fixed_n_ball_read_after_every_sample_misses_more_often_than_delta() -> None:
    """Why the default is anytime: with two equally likely outcomes (Weissman's bound is then
    Hoeffding's, nearly tight) the fixed-n ball, read after each of 1000 samples, misses the
    true p in more than delta = 20 % of the runs (significantly, at 1e-6), although each
    single read misses it less often than delta."""
    runs, delta, n_max = 2000, 0.2, 1000
    p = np.array([0.5, 0.5])
    fixed = l1_radius(np.arange(1, n_max + 1), 2, delta, bound="fixed_n")
    failures = _adaptive_failure_count(p, fixed, runs=runs, low=0.3, seed=0)
    assert failures > runs * delta and _binomial_tail(failures, runs, delta) < ALPHA, failures
