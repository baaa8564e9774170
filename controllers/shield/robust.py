"""Robust value iteration: the worst-case probability of staying safe on the product.

The controller maximises and nature, choosing each step's successor distribution from the
ambiguity set of the pair (:class:`~controllers.shield.pac.L1Ball` or
:class:`~controllers.shield.pac.IntervalModel`), minimises the probability of never
entering a violating product state::

    V_0(s, q)    = 1 if q is not violating else 0
    Q_k(s, q, a) = 0 if q is violating else min_{p in P(s, a)} sum_s' p(s') V_{k-1}(s', delta(q, L(s')))
    V_k(s, q)    = max_a Q_k(s, q, a)

``V_H(s, q)`` is the worst-case maximal probability of ``G<=H !bad`` (the states of the next
``H`` steps are all safe), and ``Q_H(s, q, a)`` the same when ``a`` is taken first and the
safest actions after it. With ``horizon=None`` the iteration runs until the largest change
is below the tolerance: it starts from 1 and decreases monotonically to the greatest fixed
point, which is the unbounded ``G !bad`` value (safety is a greatest fixed point).

Nature's choice may depend on the step (it is re-chosen every step), the usual (s,a)-
rectangular semantics of interval MDPs that Storm also uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from controllers.shield.automaton import Product
from embodied.errors import ConfigError


class AmbiguitySet(Protocol):
    """Per-pair sets of successor distributions with a worst-case expectation."""

    def worst_expectation(self, values: np.ndarray) -> np.ndarray:
        """(S, A) smallest expected ``values`` (S,) nature can reach in each pair's set."""
        ...


@dataclass(frozen=True)
class RobustValues:
    """Result of :func:`robust_safety`.

    Args:
        q_values: (S, Q, A) worst-case safety probability of taking action ``a`` in product
            state ``(s, q)`` (then acting optimally), for the horizon.
        values: (S, Q) ``max_a q_values``.
        horizon: Steps ``H``, or None for the unbounded fixed point.
        iterations: Bellman backups done.
        converged: For ``horizon=None``: the last change was below the tolerance.
    """

    q_values: np.ndarray
    values: np.ndarray
    horizon: int | None
    iterations: int
    converged: bool


def robust_safety(
    product: Product,
    model: AmbiguitySet,
    horizon: int | None,
    *,
    tolerance: float = 1e-10,
    max_iterations: int = 100_000,
) -> RobustValues:
    """Worst-case maximal probability of never reaching a violating product state.

    Args:
        product: The abstract MDP x DFA product (labels and automaton).
        model: The ambiguity set of the abstract transitions (S, A, S).
        horizon: ``H`` steps (>= 1), or None to iterate to convergence.
        tolerance: Unbounded case: stop when ``max |V_k - V_{k-1}| < tolerance``.
        max_iterations: Unbounded case: give up after this many backups (``converged`` False).

    Returns:
        The :class:`RobustValues`.
    """
    if horizon is not None and (int(horizon) != horizon or horizon < 1):
        raise ConfigError(f"horizon must be a positive int or None, got {horizon!r}")
    if not tolerance > 0:
        raise ConfigError(f"tolerance must be > 0, got {tolerance!r}")
    n_s, n_q = product.n_states, product.n_dfa
    safe_q = ~product.bad_q
    values = np.broadcast_to(safe_q.astype(np.float64), (n_s, n_q)).copy()
    n_a = int(model.worst_expectation(np.zeros(n_s)).shape[1])
    q_values = np.zeros((n_s, n_q, n_a))
    steps = int(horizon) if horizon is not None else int(max_iterations)
    s_idx = np.arange(n_s)
    converged = False
    k = 0
    for k in range(1, steps + 1):  # noqa: B007 - k is reported after the loop
        new_q = np.zeros((n_s, n_q, n_a))  # violating DFA states keep 0
        for q in np.flatnonzero(safe_q):
            # value of each successor s' seen from DFA state q: V(s', delta(q, L(s')))
            succ = values[s_idx, product.next_q[q]]
            new_q[:, q, :] = model.worst_expectation(succ)  # (S, A)
        q_values = np.clip(new_q, 0.0, 1.0)  # float round-off of the sorted sums
        new_values = q_values.max(axis=2)
        change = float(np.abs(new_values - values).max())
        values = new_values
        if horizon is None and change < tolerance:
            converged = True
            break
    return RobustValues(q_values, values, horizon, k, converged or horizon is not None)
