"""Configuration of the robust shield (:class:`~controllers.shield.shield.RobustShield`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controllers.shield.abstraction import BinSpec
from controllers.shield.pac import check_bound
from embodied.config import config_from_dict, config_to_dict
from embodied.errors import ConfigError

AMBIGUITY = ("l1", "interval")
AUTOMATON = ("auto", "builtin", "ltlf2dfa")
MAX_HORIZON = 100_000
"""Longest bounded horizon: the most backups the unbounded iteration runs
(:func:`~controllers.shield.robust.robust_safety`'s ``max_iterations``). Every step is a backup
of all product states, so a larger value (e.g. a damaged config.json's) would compute for hours."""


@dataclass
class ShieldConfig:
    """What the shield abstracts, guarantees and with which confidence.

    Args:
        bins: One :class:`BinSpec` per measured quantity (the state abstraction's grid).
        horizon: ``H``, control steps over which the violation probability is bounded; None
            bounds it over an unbounded horizon (value iteration to convergence).
        risk_bound: ``lambda``: an action is allowed when its worst-case probability of
            violating the spec within ``H`` steps (then acting as safely as possible) is
            <= ``lambda``, i.e. its safety value is >= ``1 - lambda``. In [0, 1).
        delta: PAC confidence: with probability >= ``1 - delta`` every true transition
            distribution lies in its confidence set (union bound over all state-action pairs;
            with ``bound="anytime"`` also over each pair's sample count). In (0, 1).
        bound: How the per-pair L1 radius accounts for the sample count ``n``
            (:func:`~controllers.shield.pac.l1_radius`). ``"anytime"`` (default): each
            pair's failure probability is split over ``n`` as
            ``delta / (|S||A|) * 6 / (pi^2 n^2)``, so the guarantee holds at every count at
            once and thus for counts collected adaptively (refreshing after every rollout,
            never taking blocked actions, stopping whenever), as the shield's online learning
            does. ``"fixed_n"``: the narrower radius at ``delta / (|S||A|)``, valid only when
            every pair's sample size is fixed before seeing the data.
        spec: LTLf safety specification over the abstraction's propositions, e.g.
            ``"G !bad"`` or ``"G !(bad1 | bad2)"``; other formulas need ltlf2dfa + MONA.
        ambiguity: ``"l1"`` (exact Weissman L1 ball) or ``"interval"`` (its per-successor
            interval relaxation, the interval MDP Storm checks; more conservative).
        automaton: ``"auto"`` (ltlf2dfa when installed with MONA, else built-in),
            ``"builtin"`` (``G phi`` only) or ``"ltlf2dfa"``.
        tolerance: Unbounded horizon: stop iterating when values change by less than this.
    """

    bins: tuple[BinSpec, ...]
    horizon: int | None = 10
    risk_bound: float = 0.05
    delta: float = 0.05
    bound: str = "anytime"
    spec: str = "G !bad"
    ambiguity: str = "l1"
    automaton: str = "auto"
    tolerance: float = 1e-10

    def __post_init__(self) -> None:
        self.bins = tuple(_bin_spec(b) for b in self.bins)
        if not self.bins:
            raise ConfigError(
                "shield bins is empty", fix="give one BinSpec(name, edges) per measured quantity"
            )
        names = [b.name for b in self.bins]
        if len(set(names)) != len(names):
            raise ConfigError(f"shield bins has duplicate names {names}", fix="name each once")
        if self.horizon is not None:
            if isinstance(self.horizon, bool) or int(self.horizon) != self.horizon:
                raise ConfigError(
                    f"shield horizon must be a positive int or None, got {self.horizon!r}",
                    fix="e.g. horizon=10 (control steps)",
                )
            if not 1 <= self.horizon <= MAX_HORIZON:
                raise ConfigError(
                    f"shield horizon must be 1..{MAX_HORIZON} steps, got {self.horizon!r}",
                    fix="e.g. horizon=10, or None for an unbounded horizon",
                )
            self.horizon = int(self.horizon)
        _number("risk_bound", self.risk_bound, 0.0, 1.0, closed_low=True, fix="e.g. 0.05")
        _number("delta", self.delta, 0.0, 1.0, closed_low=False, fix="e.g. 0.05")
        check_bound(self.bound)
        _number("tolerance", self.tolerance, 0.0, 1.0, closed_low=False, fix="e.g. 1e-10")
        if not isinstance(self.spec, str) or not self.spec.strip():
            raise ConfigError(
                f"shield spec must be a non-empty LTLf formula, got {self.spec!r}",
                fix="e.g. spec='G !bad'",
            )
        if self.ambiguity not in AMBIGUITY:
            raise ConfigError(
                f"shield ambiguity {self.ambiguity!r} is not one of {list(AMBIGUITY)}",
                fix="use 'l1' (exact) or 'interval' (as Storm checks it)",
            )
        if self.automaton not in AUTOMATON:
            raise ConfigError(
                f"shield automaton {self.automaton!r} is not one of {list(AUTOMATON)}",
                fix="use 'auto'",
            )

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict."""
        return config_to_dict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ShieldConfig:
        """Inverse of :meth:`to_dict`; unknown keys raise ``ConfigError`` naming them."""
        return config_from_dict(cls, d, what="shield config")


def _bin_spec(value: Any) -> BinSpec:
    """A BinSpec from a BinSpec, a JSON object or a ``(name, edges[, units])`` pair."""
    if isinstance(value, BinSpec):
        return value
    if isinstance(value, Mapping):
        unknown = set(value) - {"name", "edges", "units"}
        if unknown or not {"name", "edges"} <= set(value):
            raise ConfigError(
                f"shield bins entry {dict(value)!r} needs keys name, edges (and units)",
                fix="write {'name': 'x', 'edges': [0.5, 1.0], 'units': 'm'}",
            )
        return BinSpec(value["name"], tuple(value["edges"]), value.get("units", "1"))
    if isinstance(value, tuple | list) and len(value) in (2, 3):
        return BinSpec(value[0], tuple(value[1]), *(value[2:]))
    raise ConfigError(
        f"shield bins entry {value!r} is not a BinSpec",
        fix="use BinSpec(name, edges, units) or (name, edges)",
    )


def _number(name: str, value: Any, low: float, high: float, *, closed_low: bool, fix: str) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (low <= value if closed_low else low < value) and value < high
    if not ok:
        interval = f"{'[' if closed_low else '('}{low:g}, {high:g})"
        raise ConfigError(f"shield {name} must be in {interval}, got {value!r}", fix=fix)
