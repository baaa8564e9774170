"""Robust value iteration against Storm (stormpy 2.0 interval MDPs) and a closed form."""

from __future__ import annotations

import numpy as np
import pytest

from controllers.shield import (
    ActionSet,
    BinSpec,
    IntervalModel,
    Product,
    RobustShield,
    ShieldConfig,
    TransitionCounts,
    l1_radius,
    robust_safety,
)
from controllers.shield.automaton import builtin_safety_dfa
from tests.conftest import require


def _random_product(rng: np.random.Generator, n_states: int) -> Product:
    labels = np.zeros((n_states, 1), dtype=bool)
    labels[rng.choice(n_states, size=max(1, n_states // 4), replace=False)] = True
    return Product(labels, builtin_safety_dfa("G !bad", ["bad"]))


@pytest.mark.parametrize("seed", range(6))
def test_bounded_robust_vi_matches_storm_on_pac_interval_mdps(seed: int) -> None:
    """The PAC intervals of random sparse counts: 1 - Storm's Pmin [F<=H bad], to 1e-6."""
    require("stormpy")
    from controllers.shield.storm import storm_safety

    rng = np.random.default_rng(seed)
    n_s, n_a = int(rng.integers(3, 7)), int(rng.integers(1, 4))
    raw = rng.integers(0, 40, size=(n_s, n_a, n_s)) * (rng.random((n_s, n_a, n_s)) < 0.6)
    counts = TransitionCounts(n_s, n_a, raw)
    product = _random_product(rng, n_s)
    model = counts.intervals(0.1)
    for horizon in (1, 2, 5, 12):
        ours = robust_safety(product, model, horizon).values
        storm = storm_safety(product, model, horizon)
        np.testing.assert_allclose(ours, storm, atol=1e-6, rtol=0)
        assert ours.min() < 1.0  # not a trivial all-safe model
    assert (ours[:, 1] == 0.0).all()  # violating DFA state


@pytest.mark.parametrize("seed", range(4))
def test_unbounded_robust_vi_matches_storm_on_graph_preserving_interval_mdps(seed: int) -> None:
    """Storm checks unbounded G !bad only when every interval's lower bound is > 0."""
    require("stormpy")
    from controllers.shield.storm import storm_safety

    rng = np.random.default_rng(100 + seed)
    n_s, n_a = 5, 2
    p = rng.dirichlet(np.ones(n_s), size=(n_s, n_a)) * (rng.random((n_s, n_a, n_s)) < 0.7)
    p[:, :, 0] += 0.05  # state 0 reachable from everywhere: support never empty
    p[:, :, n_s - 1] += 0.05  # and so is the bad state: no action is perfectly safe
    p[0] = 0.0
    p[0, :, 0] = 1.0  # an absorbing safe state, so values are not all 0
    p /= p.sum(axis=2, keepdims=True)
    support = p > 0
    width = rng.uniform(0.0, 0.3, size=p.shape)
    lower = np.where(support, np.maximum(p - width, p * 0.5), 0.0)  # > 0 on the support
    upper = np.where(support, np.minimum(p + width, 1.0), 0.0)
    lower[0, :, 0] = upper[0, :, 0] = 1.0
    model = IntervalModel(lower, upper)
    labels = np.zeros((n_s, 1), dtype=bool)
    labels[n_s - 1] = True
    product = Product(labels, builtin_safety_dfa("G !bad", ["bad"]))
    ours = robust_safety(product, model, None, tolerance=1e-13)
    assert ours.converged
    np.testing.assert_allclose(ours.values, storm_safety(product, model, None), atol=1e-6)
    assert 0.0 < ours.values[1 : n_s - 1, 0].max() < 1.0


def _chain_shield(
    risk_bound: float, n: int = 10_000, k_bad: int = 1000, bound: str = "anytime"
) -> RobustShield:
    """States 0 (start), 1 (safe, absorbing), 2 (bad); 'go' from 0 hits 2 w.p. k_bad/n."""
    config = ShieldConfig(
        bins=(BinSpec("x", (0.5, 1.5)),), horizon=3, risk_bound=risk_bound, delta=0.05,
        bound=bound, automaton="builtin",
    )  # fmt: skip
    actions = ActionSet([[0.0], [1.0]])  # 0 = stay, 1 = go
    counts = TransitionCounts(3, 2)
    counts.add(0, 0, 0, times=n)  # stay: 0 -> 0
    counts.add(0, 1, 2, times=k_bad)  # go: 0 -> 2 (bad) ...
    counts.add(0, 1, 1, times=n - k_bad)  # ... or 0 -> 1
    counts.add(1, 0, 1, times=n)
    counts.add(1, 1, 1, times=n)
    return RobustShield.create(config, {"bad": lambda c: c.bins["x"] == 2}, actions, counts=counts)


def _chain_go_risk(n: int = 10_000, k_bad: int = 1000, bound: str = "anytime") -> float:
    """Closed form: nature moves eps/2 into 'bad' every step (from the highest-valued state).

    Q_3(0, go) = (1 - p - e) * (1 - e)^2 with p = k_bad/n, e = eps(n)/2 for every pair.
    """
    e = float(l1_radius(n, 3, 0.05 / 6, bound=bound)) / 2.0
    return 1.0 - (1.0 - k_bad / n - e) * (1.0 - e) ** 2


@pytest.mark.parametrize("bound", ["anytime", "fixed_n"])
def test_minimally_restrictive_set_on_a_three_state_chain(bound: str) -> None:
    risk = _chain_go_risk(bound=bound)
    start = (0, 0)
    below = _chain_shield(risk + 1e-6, bound=bound)  # go's risk just under lambda: allowed
    assert below.risk(start)[1] == pytest.approx(risk, abs=1e-12)
    assert below.allowed(start).tolist() == [True, True] and not below.flagged(start)
    above = _chain_shield(risk - 1e-6, bound=bound)  # just over lambda: blocked, stay allowed
    assert above.allowed(start).tolist() == [True, False] and not above.flagged(start)
    # the anytime balls are wider: the same counts give go a higher worst-case risk
    assert _chain_go_risk(bound="anytime") > _chain_go_risk(bound="fixed_n")
    # lambda = 0: every action exceeds it; the safest (stay) stays allowed and is flagged
    strict = _chain_shield(0.0, bound=bound)
    assert strict.allowed(start).tolist() == [True, False] and strict.flagged(start)
    assert strict.risk(start)[0] < strict.risk(start)[1]
