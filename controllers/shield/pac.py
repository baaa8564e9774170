"""Transition counts and PAC confidence sets of the abstract transition probabilities.

For each abstract state-action pair ``(s, a)`` visited ``n = N(s, a)`` times, the empirical
successor distribution ``p_hat(. | s, a) = N(s, a, .) / n`` is within L1 distance ``eps`` of
the true ``p(. | s, a)`` with probability at least ``1 - delta_sa`` (Weissman, Ordentlich,
Seroussi, Verdu, Weinberger 2003, "Inequalities for the L1 deviation of the empirical
distribution"), over ``k = |S|`` possible successors::

    P(||p - p_hat||_1 >= eps) <= (2^k - 2) exp(-n eps^2 / 2)
    =>  eps = sqrt(2 / n * (ln(2^k - 2) - ln delta_sa))

``ln(2^k - 2)`` is evaluated as ``k ln 2 + log1p(-2^(1-k))`` so it does not overflow for
large ``k``. The total confidence ``delta`` is split over all pairs by a union bound,
``delta_sa = delta / (|S| |A|)``.

That bound holds for a sample size ``n`` fixed in advance. The shield's counts are not: it
refreshes after every rollout, reads each ball at whatever count the pair has reached then,
and never takes the actions it blocks, so which pairs grow, and when they are read, depends
on the data. The default ``bound="anytime"`` therefore adds a union bound over ``n``: the
ball at count ``n`` uses the failure probability::

    delta_sa_n = delta_sa * 6 / (pi^2 n^2)        (sum over n >= 1 is delta_sa)
    =>  eps_n = sqrt(2 / n * (ln(2^k - 2) - ln delta_sa + ln(pi^2 n^2 / 6)))

(the fixed-``n`` radius at ``delta_sa_n``; it shrinks like ``sqrt(ln n / n)`` instead of
``sqrt(1 / n)``). Why this holds under adaptive collection: the model assumes that, given the
abstract pair, each visit draws its successor i.i.d. from ``p(. | s, a)``, so the successors of
a pair are the first ``N(s, a)`` entries of one i.i.d. sequence ``X_1, X_2, ...`` of that pair,
whatever rule decides which pair is visited, when to refresh and when to stop. The ball at
count ``n`` is a function of ``X_1 .. X_n`` alone and misses ``p`` with probability at most
``delta_sa_n``; summing over every ``n >= 1`` and every pair, with probability at least
``1 - delta`` every pair's true distribution lies in its ball at every count simultaneously,
hence at every count at which the shield reads it, for any data-dependent stopping or refresh
rule.
``bound="fixed_n"`` (``eps = sqrt(2 / n * (ln(2^k - 2) - ln delta_sa))``, the narrower radius)
keeps the ``1 - delta`` guarantee only when each pair's sample size is fixed before the data is
seen; it is not valid for the shield's own online learning.

An unvisited pair gets ``eps = 2``: the L1 ball of radius 2 is the whole simplex.

Two ambiguity sets of the same data feed the robust value iteration
(:mod:`controllers.shield.robust`), both with :meth:`worst_expectation`, the smallest
expected value nature can reach:

* :class:`L1Ball` - the exact ball, worst case by moving ``eps / 2`` of mass from the
  highest-valued successors to the lowest-valued one (sort once, ``O(k log k)``);
* :class:`IntervalModel` - per-successor intervals ``[max(0, p_hat - eps/2),
  min(1, p_hat + eps/2)]``, the interval MDP that Storm checks. Every distribution of the L1
  ball lies inside these intervals (the positive and the negative deviations of ``p - p_hat``
  each sum to at most ``eps / 2``), so the interval model is a superset, and its robust value
  is a lower bound of the L1 ball's: more conservative, equally sound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from embodied.errors import ConfigError

BOUNDS = ("anytime", "fixed_n")
"""Radius variants: ``"anytime"`` (default; valid for adaptively collected counts, every n at
once) and ``"fixed_n"`` (valid only for a sample size fixed in advance)."""


def pair_confidence(delta: float, n_states: int, n_actions: int) -> float:
    """Per-pair failure probability ``delta / (|S| |A|)`` (union bound over all pairs).

    Args:
        delta: Total failure probability of the PAC guarantee, in (0, 1).
        n_states: ``|S|``, abstract states.
        n_actions: ``|A|``, actions.
    """
    if not 0.0 < delta < 1.0:
        raise ConfigError(f"PAC delta must be in (0, 1), got {delta!r}", fix="e.g. delta=0.05")
    if n_states < 1 or n_actions < 1:
        raise ConfigError(f"need >= 1 state and action, got {n_states} and {n_actions}")
    return delta / (n_states * n_actions)


def check_bound(bound: str) -> str:
    """``bound`` if it is one of :data:`BOUNDS`, else ``ConfigError``."""
    if bound not in BOUNDS:
        raise ConfigError(
            f"PAC bound {bound!r} is not one of {list(BOUNDS)}",
            fix="use 'anytime' (valid for adaptively collected counts) or 'fixed_n'",
        )
    return bound


def l1_radius(
    n: int | np.ndarray, n_successors: int, delta_sa: float, *, bound: str = "anytime"
) -> np.ndarray:
    """Weissman et al. 2003 L1 radius for ``n`` samples over ``n_successors`` outcomes.

    Args:
        n: Sample count(s) ``N(s, a)``; 0 means unvisited.
        n_successors: ``k``, number of possible outcomes (``|S|``).
        delta_sa: Failure probability of this one ball, in (0, 1).
        bound: ``"anytime"`` (default): the fixed-``n`` radius at
            ``delta_sa * 6 / (pi^2 n^2)``, so the ball holds at every ``n >= 1`` at once with
            probability ``>= 1 - delta_sa`` (valid for adaptively collected counts).
            ``"fixed_n"``: the radius at ``delta_sa`` itself, valid only for a sample size
            fixed in advance.

    Returns:
        ``eps`` per count, in [0, 2] (dimensionless, an L1 distance between distributions);
        2 for ``n == 0``; 0 for ``k == 1`` (one outcome: the distribution is known).
    """
    check_bound(bound)
    if not 0.0 < delta_sa < 1.0:
        raise ConfigError(f"per-pair delta must be in (0, 1), got {delta_sa!r}")
    counts = np.asarray(n, dtype=np.float64)
    if (counts < 0).any():
        raise ConfigError(f"sample counts must be >= 0, got {counts.min()}")
    k = int(n_successors)
    if k < 1:
        raise ConfigError(f"n_successors must be >= 1, got {n_successors}")
    if k == 1:
        return np.where(counts > 0, 0.0, 2.0)
    visited = np.maximum(counts, 1.0)
    log_k = k * math.log(2.0) + math.log1p(-(2.0 ** (1 - k)))  # ln(2^k - 2)
    log_terms = np.full_like(visited, log_k - math.log(delta_sa))
    if bound == "anytime":  # -ln(delta_sa * 6 / (pi^2 n^2)) = -ln delta_sa + ln(pi^2 n^2 / 6)
        log_terms += math.log(math.pi**2 / 6.0) + 2.0 * np.log(visited)
    eps = np.sqrt(2.0 / visited * log_terms)
    return np.where(counts > 0, np.minimum(eps, 2.0), 2.0)


@dataclass(frozen=True)
class L1Ball:
    """``{p in simplex : ||p - p_hat(s, a)||_1 <= eps(s, a)}`` for every pair.

    Args:
        p_hat: (S, A, S) empirical successor distributions (rows sum to 1).
        eps: (S, A) L1 radii in [0, 2].
    """

    p_hat: np.ndarray
    eps: np.ndarray

    def worst_expectation(self, values: np.ndarray) -> np.ndarray:
        """``min_{p in ball(s, a)} sum_s' p(s') values[s']`` for every pair, shape (S, A).

        Nature adds ``min(eps/2, 1 - p_hat(lowest))`` to the lowest-valued successor and takes
        the same mass from the highest-valued successors downwards; that is optimal because
        any distribution in the ball moves at most ``eps / 2`` of mass.
        """
        n_s, n_a, k = self.p_hat.shape
        v = np.asarray(values, dtype=np.float64)
        order = np.argsort(v, kind="stable")
        ps = self.p_hat.reshape(-1, k)[:, order]
        vs = v[order]
        add = np.minimum(self.eps.reshape(-1) / 2.0, 1.0 - ps[:, 0])
        # mass strictly above each sorted position: what is taken before reaching it
        above = np.cumsum(ps[:, ::-1], axis=1)[:, ::-1] - ps
        removed = np.clip(add[:, None] - above, 0.0, ps)
        removed[:, 0] = 0.0  # the lowest successor only receives mass
        worst = ps - removed
        worst[:, 0] += add
        return (worst @ vs).reshape(n_s, n_a)


@dataclass(frozen=True)
class IntervalModel:
    """Per-successor probability intervals ``[lower, upper]`` for every pair (an interval MDP).

    Args:
        lower: (S, A, S) lower bounds, ``sum lower <= 1``.
        upper: (S, A, S) upper bounds, ``sum upper >= 1``.
    """

    lower: np.ndarray
    upper: np.ndarray

    @classmethod
    def from_l1(cls, ball: L1Ball) -> IntervalModel:
        """``[max(0, p_hat - eps/2), min(1, p_hat + eps/2)]``: contains the whole L1 ball."""
        half = ball.eps[..., None] / 2.0
        return cls(np.maximum(0.0, ball.p_hat - half), np.minimum(1.0, ball.p_hat + half))

    def worst_expectation(self, values: np.ndarray) -> np.ndarray:
        """``min_p sum_s' p(s') values[s']`` over distributions inside the intervals, (S, A).

        Start from the lower bounds and pour the remaining mass ``1 - sum lower`` into the
        successors in increasing order of value, each up to its upper bound.
        """
        n_s, n_a, k = self.lower.shape
        v = np.asarray(values, dtype=np.float64)
        order = np.argsort(v, kind="stable")
        lo = self.lower.reshape(-1, k)[:, order]
        width = self.upper.reshape(-1, k)[:, order] - lo
        slack = np.maximum(1.0 - lo.sum(axis=1), 0.0)
        before = np.cumsum(width, axis=1) - width
        worst = lo + np.clip(slack[:, None] - before, 0.0, width)
        return (worst @ v[order]).reshape(n_s, n_a)


class TransitionCounts:
    """``N(s, a, s')``: how often action ``a`` in abstract state ``s`` led to ``s'``.

    Args:
        n_states: ``|S|``, abstract states.
        n_actions: ``|A|``, actions.
        counts: Optional (S, A, S) non-negative integer counts to start from.
    """

    def __init__(self, n_states: int, n_actions: int, counts: np.ndarray | None = None) -> None:
        if int(n_states) < 1 or int(n_actions) < 1:
            raise ConfigError(f"need >= 1 state and action, got {n_states} and {n_actions}")
        self.n_states, self.n_actions = int(n_states), int(n_actions)
        shape = (self.n_states, self.n_actions, self.n_states)
        if counts is None:
            self.counts = np.zeros(shape, dtype=np.int64)
        else:
            arr = np.asarray(counts)
            if arr.shape != shape:
                raise ConfigError(f"counts have shape {arr.shape}, expected {shape}")
            if (arr < 0).any() or not np.all(np.equal(np.mod(arr, 1), 0)):
                raise ConfigError("counts must be non-negative integers")
            self.counts = arr.astype(np.int64)

    def add(self, state: int, action: int, next_state: int, times: int = 1) -> None:
        """Record ``times`` observed transitions ``state -action-> next_state``."""
        for name, value, size in (
            ("state", state, self.n_states),
            ("action", action, self.n_actions),
            ("next_state", next_state, self.n_states),
        ):
            if not 0 <= int(value) < size:
                raise ConfigError(f"transition {name} {value} outside [0, {size})")
        if times < 0:
            raise ConfigError(f"times must be >= 0, got {times}")
        self.counts[int(state), int(action), int(next_state)] += int(times)

    def visits(self) -> np.ndarray:
        """(S, A) sample counts ``N(s, a)``."""
        return self.counts.sum(axis=2)

    def estimate(self) -> np.ndarray:
        """(S, A, S) empirical distributions; unvisited pairs get the uniform one.

        The uniform row of an unvisited pair never matters: its ball has ``eps = 2``.
        """
        n = self.visits()[..., None].astype(np.float64)
        uniform = np.full(self.counts.shape, 1.0 / self.n_states)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(n > 0, self.counts / np.maximum(n, 1.0), uniform)

    def radii(self, delta: float, *, bound: str = "anytime") -> np.ndarray:
        """(S, A) L1 radii with total confidence ``1 - delta`` (union bound over pairs).

        ``bound="anytime"`` (default) adds the union bound over each pair's count ``n``
        (see :func:`l1_radius`), valid however the counts were collected; ``"fixed_n"``
        only for sample sizes fixed in advance.
        """
        delta_sa = pair_confidence(delta, self.n_states, self.n_actions)
        return l1_radius(self.visits(), self.n_states, delta_sa, bound=bound)

    def l1_ball(self, delta: float, *, bound: str = "anytime") -> L1Ball:
        """The PAC L1 balls (holding all true distributions w.p. >= ``1 - delta``; with
        ``bound="fixed_n"`` only for sample sizes fixed in advance)."""
        return L1Ball(self.estimate(), self.radii(delta, bound=bound))

    def intervals(self, delta: float, *, bound: str = "anytime") -> IntervalModel:
        """The interval MDP containing :meth:`l1_ball` (for Storm and the interval VI)."""
        return IntervalModel.from_l1(self.l1_ball(delta, bound=bound))

    def copy(self) -> TransitionCounts:
        """An independent copy."""
        return TransitionCounts(self.n_states, self.n_actions, self.counts.copy())
