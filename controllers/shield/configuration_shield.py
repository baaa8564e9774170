"""Configuration of the robust shield (:class:`~controllers.shield.shield.RobustShield`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from controllers.shield.abstraction import BinSpec
from controllers.shield.pac import BOUNDS
from embodied.config import Rule, checked, config_from_dict, config_to_dict, validate
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

    config_name: ClassVar[str] = "shield"

    bins: tuple[BinSpec, ...] = checked(
        min_len=1, fix="give one BinSpec(name, edges) per measured quantity"
    )
    horizon: int | None = checked(
        10, ge=1, le=MAX_HORIZON, fix="e.g. horizon=10 (control steps), or None for unbounded"
    )
    risk_bound: float = checked(0.05, ge=0, lt=1, fix="e.g. 0.05")
    delta: float = checked(0.05, gt=0, lt=1, fix="e.g. 0.05")
    bound: str = checked(
        "anytime",
        choices=BOUNDS,
        fix="use 'anytime' (valid for adaptively collected counts) or 'fixed_n'",
    )
    spec: str = "G !bad"
    ambiguity: str = checked(
        "l1", choices=AMBIGUITY, fix="use 'l1' (exact) or 'interval' (as Storm checks it)"
    )
    automaton: str = checked("auto", choices=AUTOMATON, fix="use 'auto'")
    tolerance: float = checked(1e-10, gt=0, lt=1, fix="e.g. 1e-10")

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "bins",
            lambda c: len({b.name for b in c.bins}) == len(c.bins),
            lambda c: f"has duplicate names {[b.name for b in c.bins]}",
            "name each once",
        ),
        Rule(
            "spec",
            lambda c: isinstance(c.spec, str) and bool(c.spec.strip()),
            "must be a non-empty LTLf formula",
            "e.g. spec='G !bad'",
        ),
    )

    def __post_init__(self) -> None:
        self.bins = tuple(_bin_spec(b) for b in self.bins)
        validate(self)
        if self.horizon is not None:
            self.horizon = int(self.horizon)

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
