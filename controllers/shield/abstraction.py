"""A finite abstraction of a continuous state and a finite set of actions.

* :class:`BinSpec` - the bins of one measured scalar quantity (interior edges, in its units).
* :class:`Abstraction` - the grid of bins of several quantities: a measurement vector maps to
  one abstract state index (row-major over the quantities), an index maps back to a readable
  label and to its :class:`Cell` (bounds per quantity). Atomic propositions (e.g. ``"bad"``)
  are predicates over cells, evaluated once per abstract state; they drive the automaton of
  the safety specification.
* :class:`ActionSet` - a finite list of action vectors for a continuous action space; a
  proposed action maps to the nearest element.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from embodied.config import Rule, checked, validate
from embodied.errors import ConfigError

Measure = Callable[[Any], Sequence[float] | np.ndarray]
"""Maps an observation (a flat observation dict, or whatever a gymnasium env returns) to the
measurement vector, one value per :class:`BinSpec`, in the bins' units."""


@dataclass(frozen=True)
class BinSpec:
    """The bins of one measured scalar quantity.

    ``k`` strictly increasing interior ``edges`` cut the real line into ``k + 1`` bins:
    ``(-inf, e0)``, ``[e0, e1)``, ..., ``[e_{k-1}, +inf)``. The outer bins are open so every
    measurement (even one outside the range the designer expected) has a state.

    Args:
        name: Quantity name, e.g. ``"x"`` (also used in labels and proposition predicates).
        edges: Interior bin edges in ``units``, strictly increasing, finite, at least one.
        units: Unit string of the quantity (``"1"`` for dimensionless).
    """

    name: str = checked(min_len=1, fix="name the quantity")
    edges: tuple[float, ...] = checked(
        min_len=1,
        fix="give at least one finite interior edge (two bins); the outer bins are open-ended",
    )
    units: str = "1"

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "edges",
            lambda c: all(a < b for a, b in itertools.pairwise(c.edges)),
            "are not strictly increasing",
            "sort the edges and remove duplicates",
        ),
    )

    @property
    def config_name(self) -> str:
        """How errors name these bins."""
        return f"bins {self.name!r}"

    def __post_init__(self) -> None:
        if isinstance(self.edges, tuple | list):  # lists from JSON become tuples
            object.__setattr__(self, "edges", tuple(float(e) for e in self.edges))
        validate(self)

    @property
    def n_bins(self) -> int:
        """Number of bins (``len(edges) + 1``)."""
        return len(self.edges) + 1

    def bin_of(self, value: float) -> int:
        """Index of the bin holding ``value`` (NaN is refused: it has no bin)."""
        if value != value:
            raise ConfigError(
                f"bins {self.name!r}: measurement is NaN",
                fix="check the sensor or the measure function",
            )
        # side="right": a value equal to an edge belongs to the bin that starts there
        return int(np.searchsorted(self.edges, value, side="right"))

    def bounds(self, index: int) -> tuple[float, float]:
        """(low, high) of bin ``index`` in ``units``; the outer bins reach -inf / +inf."""
        if not 0 <= index < self.n_bins:
            raise ConfigError(f"bins {self.name!r}: bin {index} outside [0, {self.n_bins})")
        low = -math.inf if index == 0 else self.edges[index - 1]
        high = math.inf if index == len(self.edges) else self.edges[index]
        return low, high

    def label(self, index: int) -> str:
        """Readable bin, e.g. ``x<0.5``, ``0.5<=x<1``, ``x>=1``."""
        low, high = self.bounds(index)
        if low == -math.inf:
            return f"{self.name}<{high:g}"
        if high == math.inf:
            return f"{self.name}>={low:g}"
        return f"{low:g}<={self.name}<{high:g}"


@dataclass(frozen=True)
class Cell:
    """One abstract state: its bin per quantity and those bins' bounds.

    Args:
        index: The abstract state index.
        bins: Bin index per quantity name.
        low: Lower bin bound per quantity name (units of its :class:`BinSpec`; -inf outermost).
        high: Upper bin bound per quantity name (+inf outermost).
    """

    index: int
    bins: Mapping[str, int]
    low: Mapping[str, float]
    high: Mapping[str, float]


Proposition = Callable[[Cell], bool] | Sequence[bool] | np.ndarray
"""An atomic proposition: a predicate over cells, or one truth value per abstract state."""


class Abstraction:
    """Grid abstraction over named, binned quantities with atomic propositions.

    Args:
        bins: One :class:`BinSpec` per measured quantity; the abstract state index is the
            row-major index of the bin tuple (the last quantity varies fastest).
        propositions: Atomic propositions by name (names as used in the LTL specification,
            lowercase letters, digits and ``_``): each a predicate over :class:`Cell` or a
            boolean per abstract state. Evaluated once here, so predicates may be slow.
        measure: Observation -> measurement vector (one value per bin spec, in its units).
            Default: ``obs[key]`` for a mapping observation, else the observation itself.
        key: Observation key read by the default ``measure``.

    Raises:
        ConfigError: duplicate quantity names, bad proposition names or lengths.
    """

    def __init__(
        self,
        bins: Sequence[BinSpec],
        propositions: Mapping[str, Proposition] | None = None,
        *,
        measure: Measure | None = None,
        key: str = "state",
    ) -> None:
        self.bins = tuple(bins)
        if not self.bins:
            raise ConfigError("abstraction needs at least one BinSpec", fix="pass bins=[...]")
        names = [b.name for b in self.bins]
        if len(set(names)) != len(names):
            raise ConfigError(f"abstraction quantity names are not unique: {names}")
        self.shape = tuple(b.n_bins for b in self.bins)
        self.n_states = int(np.prod(self.shape))
        self.key = key
        self._measure = measure
        props = dict(propositions or {})
        self.propositions: tuple[str, ...] = tuple(props)
        # (n_states, n_props) truth table: computed once, so the online path is a lookup
        self.label_matrix = np.zeros((self.n_states, len(self.propositions)), dtype=bool)
        for j, (name, prop) in enumerate(props.items()):
            check_proposition_name(name)
            if callable(prop):
                column = [bool(prop(self.cell(s))) for s in range(self.n_states)]
            else:
                column = [bool(v) for v in np.asarray(prop, dtype=bool).reshape(-1)]
                if len(column) != self.n_states:
                    raise ConfigError(
                        f"proposition {name!r} has {len(column)} truth values for "
                        f"{self.n_states} abstract states",
                        fix="give one value per abstract state, or a predicate over cells",
                    )
            self.label_matrix[:, j] = column

    # ---- states -------------------------------------------------------------------------

    def index(self, measurement: Sequence[float] | np.ndarray) -> int:
        """Abstract state of a measurement vector (one value per quantity, in its units)."""
        values = np.asarray(measurement, dtype=np.float64).reshape(-1)
        if values.shape != (len(self.bins),):
            raise ConfigError(
                f"measurement has {values.size} values, abstraction has "
                f"{len(self.bins)} quantities {[b.name for b in self.bins]}",
                fix="make the measure function return one value per BinSpec",
            )
        bins = tuple(b.bin_of(float(v)) for b, v in zip(self.bins, values, strict=True))
        return int(np.ravel_multi_index(bins, self.shape))

    def measure(self, obs: Any) -> np.ndarray:
        """Measurement vector of an observation (the ``measure`` function, or ``obs[key]``)."""
        if self._measure is not None:
            raw = self._measure(obs)
        elif isinstance(obs, Mapping):
            if self.key not in obs:
                raise ConfigError(
                    f"observation has no {self.key!r}; keys: {sorted(obs)}",
                    fix="pass key=<observation key> or a measure function",
                )
            raw = obs[self.key]
        else:
            raw = obs
        return np.asarray(raw, dtype=np.float64).reshape(-1)

    def state_of(self, obs: Any) -> int:
        """Abstract state of an observation."""
        return self.index(self.measure(obs))

    def bins_of(self, state: int) -> tuple[int, ...]:
        """Bin index per quantity of abstract state ``state``."""
        self._check_state(state)
        return tuple(int(i) for i in np.unravel_index(state, self.shape))

    def cell(self, state: int) -> Cell:
        """The :class:`Cell` of abstract state ``state``."""
        idx = self.bins_of(state)
        bounds = [b.bounds(i) for b, i in zip(self.bins, idx, strict=True)]
        names = [b.name for b in self.bins]
        return Cell(
            index=state,
            bins=dict(zip(names, idx, strict=True)),
            low={n: lo for n, (lo, _) in zip(names, bounds, strict=True)},
            high={n: hi for n, (_, hi) in zip(names, bounds, strict=True)},
        )

    def label(self, state: int) -> str:
        """Readable name of abstract state ``state``, e.g. ``x<0.5,v>=1 {bad}``."""
        idx = self.bins_of(state)
        text = ",".join(b.label(i) for b, i in zip(self.bins, idx, strict=True))
        true = self.labels(state)
        return f"{text} {{{','.join(sorted(true))}}}" if true else text

    def labels(self, state: int) -> frozenset[str]:
        """Atomic propositions true in abstract state ``state``."""
        self._check_state(state)
        row = self.label_matrix[state]
        return frozenset(p for p, v in zip(self.propositions, row, strict=True) if v)

    def states(self) -> Iterator[int]:
        """All abstract state indices."""
        return iter(range(self.n_states))

    def _check_state(self, state: int) -> None:
        if not 0 <= int(state) < self.n_states:
            raise ConfigError(f"abstract state {state} outside [0, {self.n_states})")


def check_proposition_name(name: str) -> None:
    """Refuse names the LTL parsers cannot read (lowercase letter, then ``[a-z0-9_]``)."""
    ok = (
        isinstance(name, str)
        and name[:1].isalpha()
        and name[:1].islower()
        and all(c.islower() or c.isdigit() or c == "_" for c in name)
        and name not in ("true", "false", "last", "end")
    )
    if not ok:
        raise ConfigError(
            f"atomic proposition name {name!r} is not valid",
            fix="use a lowercase letter followed by lowercase letters, digits or '_' "
            "(not true/false/last/end)",
        )


class ActionSet:
    """A finite list of action vectors (the shield's discrete actions).

    Args:
        vectors: (n_actions, action_dim) action vectors in the env's action units; for a
            gymnasium ``Discrete(n)`` env use :meth:`discrete`.

    Raises:
        ConfigError: empty, ragged, non-finite or duplicate vectors.
    """

    def __init__(self, vectors: Sequence[Sequence[float]] | np.ndarray) -> None:
        arr = np.asarray(vectors, dtype=np.float64)
        if arr.ndim == 1:
            arr = arr[:, None]  # a list of scalars: 1-dim actions
        if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
            raise ConfigError(
                f"action set needs a (n_actions, action_dim) array, got shape {arr.shape}",
                fix="give a list of action vectors",
            )
        if not np.isfinite(arr).all():
            raise ConfigError(f"action set has non-finite vectors {arr.tolist()}")
        if len(np.unique(arr, axis=0)) != len(arr):
            raise ConfigError(f"action set has duplicate vectors {arr.tolist()}")
        self.vectors = arr
        self.vectors.setflags(write=False)

    @classmethod
    def discrete(cls, n: int) -> ActionSet:
        """Actions ``0 .. n-1`` of a gymnasium ``Discrete(n)`` space, as 1-dim vectors."""
        if int(n) != n or n < 1:
            raise ConfigError(f"discrete action count must be a positive int, got {n!r}")
        return cls(np.arange(int(n), dtype=np.float64)[:, None])

    @classmethod
    def grid(cls, low: Sequence[float], high: Sequence[float], steps: int) -> ActionSet:
        """``steps`` evenly spaced values per dim between ``low`` and ``high`` (all combinations)."""
        lo, hi = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
        if lo.shape != hi.shape or lo.ndim != 1 or int(steps) < 1:
            raise ConfigError(f"action grid needs equal-length low/high and steps >= 1: {steps}")
        axes = [np.linspace(a, b, int(steps)) for a, b in zip(lo, hi, strict=True)]
        mesh = np.meshgrid(*axes, indexing="ij")
        return cls(np.stack([m.reshape(-1) for m in mesh], axis=1))

    def __len__(self) -> int:
        return int(self.vectors.shape[0])

    @property
    def dim(self) -> int:
        """Action dimension."""
        return int(self.vectors.shape[1])

    def distances(self, action: Sequence[float] | np.ndarray | float) -> np.ndarray:
        """Euclidean distance (action units) from ``action`` to every element."""
        a = np.asarray(action, dtype=np.float64).reshape(-1)
        if a.shape != (self.dim,):
            raise ConfigError(
                f"action has {a.size} values, action set has dim {self.dim}",
                fix="use an action set built for this env's action space",
            )
        return np.linalg.norm(self.vectors - a, axis=1)

    def nearest(
        self, action: Sequence[float] | np.ndarray | float, mask: np.ndarray | None = None
    ) -> int:
        """Index of the element closest to ``action`` (among ``mask``'s True entries, if given).

        Ties go to the lowest index, so the choice is deterministic.
        """
        d = self.distances(action)
        if mask is not None:
            m = np.asarray(mask, dtype=bool)
            if m.shape != d.shape or not m.any():
                raise ConfigError(f"action mask {m.tolist()} must have {len(d)} entries, one True")
            d = np.where(m, d, np.inf)
        return int(np.argmin(d))

    def __getitem__(self, index: int) -> np.ndarray:
        return self.vectors[index].copy()
