"""The robust shield: allowed actions from PAC-learned interval MDPs and an LTL safety spec.

* :class:`RobustShield` - from transition counts, the abstraction, the spec's DFA and the
  risk bound ``lambda``, the allowed actions of every product state ``(s, q)``: those whose
  worst-case probability of violating the spec within ``H`` steps is <= ``lambda`` over the
  PAC confidence sets (minimally restrictive: only actions above the bound are blocked; when
  every action is above it, the safest ones stay allowed and the state is flagged). It tracks
  the DFA state online (:meth:`~RobustShield.reset`, :meth:`~RobustShield.advance`), learns
  from observed transitions (:meth:`~RobustShield.observe`) and recomputes on demand
  (:meth:`~RobustShield.refresh`). Saved as safetensors + JSON, never pickle.
* :class:`ShieldFilter` - the :class:`~embodied.contracts.ActionFilter` adapter: it sits where
  the loop's safety filter sits, snaps the proposed action to the nearest discrete action and
  replaces a blocked one by the closest allowed action. :meth:`ShieldFilter.action_masks` is
  an ``sb3_contrib.common.wrappers.ActionMasker`` mask function for MaskablePPO.
* :class:`ShieldedEnv` - a gymnasium wrapper that keeps a :class:`ShieldFilter` tracking the
  env's observations, enforces the shield on each step and exposes ``action_masks()``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from controllers.shield.abstraction import Abstraction, ActionSet, Measure
from controllers.shield.automaton import DFA, Product, compile_spec
from controllers.shield.configuration_shield import ShieldConfig
from controllers.shield.pac import TransitionCounts
from controllers.shield.robust import RobustValues, robust_safety
from embodied.errors import CheckpointError, ConfigError
from embodied.io import (
    atomic_path,
    build_from_file,
    load_safetensors_file,
    read_json_file,
    write_json,
)

CONFIG_NAME = "config.json"
TENSORS_NAME = "shield.safetensors"
FORMAT = "embodied.shield/1"
RESAVE_FIX = "re-save the shield with RobustShield.save"
ROUNDOFF = 1e-12
"""Slack on the risk bound and on ties between the safest actions (float round-off of the
sorted worst-case sums), so a value that equals the bound is not blocked by the last bit."""

ProductState = tuple[int, int]


class RobustShield:
    """Minimally restrictive shield over PAC confidence sets of an abstract MDP.

    Args:
        config: The :class:`ShieldConfig` (bins, horizon, risk bound, delta, bound, spec).
        abstraction: The state abstraction; its bins must equal ``config.bins``.
        actions: The discrete actions.
        counts: Transition counts to start from (default: none observed yet).
        dfa: The spec's automaton (default: compiled from ``config.spec``).

    Raises:
        ConfigError: bins or sizes that do not match, or a spec that does not compile.
    """

    def __init__(
        self,
        config: ShieldConfig,
        abstraction: Abstraction,
        actions: ActionSet,
        counts: TransitionCounts | None = None,
        dfa: DFA | None = None,
    ) -> None:
        if tuple(abstraction.bins) != tuple(config.bins):
            raise ConfigError(
                f"abstraction bins {[b.name for b in abstraction.bins]} differ from the config's "
                f"{[b.name for b in config.bins]}",
                fix="build the abstraction from config.bins (RobustShield.create does)",
            )
        self.config = config
        self.abstraction = abstraction
        self.actions = actions
        n_s, n_a = abstraction.n_states, len(actions)
        self.counts = counts if counts is not None else TransitionCounts(n_s, n_a)
        if (self.counts.n_states, self.counts.n_actions) != (n_s, n_a):
            raise ConfigError(
                f"counts are for {self.counts.n_states} states x {self.counts.n_actions} actions;"
                f" the shield has {n_s} x {n_a}",
                fix="start from counts of the same abstraction and action set",
            )
        self.dfa = dfa or compile_spec(
            config.spec,
            abstraction.propositions,
            config.automaton,  # type: ignore[arg-type]  # validated by ShieldConfig
        )
        self.product = Product(abstraction.label_matrix, self.dfa)
        self.current: ProductState | None = None
        self._occupiable = self.product.occupiable() & ~self.product.bad_q[None, :]
        self.refresh()

    @classmethod
    def create(
        cls,
        config: ShieldConfig,
        propositions: Mapping[str, Any],
        actions: ActionSet,
        *,
        measure: Measure | None = None,
        key: str = "state",
        counts: TransitionCounts | None = None,
    ) -> RobustShield:
        """A shield whose abstraction is built from ``config.bins``.

        Args:
            config: The shield config.
            propositions: Atomic propositions (see :class:`Abstraction`), e.g.
                ``{"bad": lambda cell: cell.high["x"] <= 0.0}``.
            actions: The discrete actions.
            measure: Observation -> measurement vector (default ``obs[key]``).
            key: Observation key of the default measure.
            counts: Transition counts to start from.
        """
        abstraction = Abstraction(config.bins, propositions, measure=measure, key=key)
        return cls(config, abstraction, actions, counts)

    # ---- learning and computing ---------------------------------------------------------

    def observe(self, state: int, action: int, next_state: int) -> None:
        """Count one observed abstract transition; takes effect at the next :meth:`refresh`."""
        self.counts.add(state, action, next_state)
        self.stale = True

    def refresh(self) -> RobustValues:
        """Recompute the worst-case safety values and the allowed actions from the counts."""
        c = self.config
        ball = self.counts.l1_ball(c.delta, bound=c.bound)
        model = ball if c.ambiguity == "l1" else self.counts.intervals(c.delta, bound=c.bound)
        self.values = robust_safety(self.product, model, c.horizon, tolerance=c.tolerance)
        q = self.values.q_values  # (S, Q, A)
        meets = np.asarray(1.0 - q <= c.risk_bound + ROUNDOFF)
        best = np.asarray(q >= q.max(axis=2, keepdims=True) - ROUNDOFF)
        self.fallback_table: np.ndarray = np.logical_not(
            meets.any(axis=2)
        )  # (S, Q): none meets the bound
        self.allowed_table: np.ndarray = np.where(self.fallback_table[..., None], best, meets)
        self.stale = False
        return self.values

    # ---- online tracking ----------------------------------------------------------------

    def reset(self, state: int) -> ProductState:
        """Start tracking a trace in abstract state ``state``; returns the product state."""
        self.current = self.product.initial(state)
        return self.current

    def advance(self, next_state: int) -> ProductState:
        """Move the tracked product state into abstract state ``next_state``."""
        if self.current is None:
            raise ConfigError(
                "shield.advance before shield.reset", fix="call reset(state) at episode start"
            )
        self.current = self.product.successor(self.current[1], next_state)
        return self.current

    def _resolve(self, state: ProductState | None) -> ProductState:
        if state is None:
            if self.current is None:
                raise ConfigError(
                    "the shield tracks no state yet", fix="call reset(state) or pass (s, q)"
                )
            return self.current
        s, q = (int(x) for x in state)
        if not (0 <= s < self.product.n_states and 0 <= q < self.product.n_dfa):
            raise ConfigError(
                f"product state {state} outside {self.product.n_states} x {self.product.n_dfa}"
            )
        return s, q

    # ---- queries ------------------------------------------------------------------------

    def allowed(self, state: ProductState | None = None) -> np.ndarray:
        """(A,) bool mask of allowed actions in product state ``(s, q)`` (default: tracked)."""
        s, q = self._resolve(state)
        return self.allowed_table[s, q].copy()

    def safety(self, state: ProductState | None = None) -> np.ndarray:
        """(A,) worst-case probability of satisfying the spec for ``H`` steps, per action."""
        s, q = self._resolve(state)
        return self.values.q_values[s, q].copy()

    def risk(self, state: ProductState | None = None) -> np.ndarray:
        """(A,) worst-case violation probability within ``H`` steps (``1 - safety``)."""
        return 1.0 - self.safety(state)

    def flagged(self, state: ProductState | None = None) -> bool:
        """True when no action meets the risk bound there (the safest ones are allowed)."""
        s, q = self._resolve(state)
        return bool(self.fallback_table[s, q])

    def violated(self, state: ProductState | None = None) -> bool:
        """True when the trace has violated the spec (the product state is in the bad sink)."""
        s, q = self._resolve(state)
        return self.product.violating(s, q)

    def fraction_blocked(self) -> float:
        """Blocked share of (state, action) pairs over occupiable, non-violating product states."""
        mask = self._occupiable
        if not mask.any():
            return 0.0
        return float((~self.allowed_table[mask]).mean())

    # ---- persistence --------------------------------------------------------------------

    def save(self, folder: str | os.PathLike[str]) -> Path:
        """Write ``config.json`` and ``shield.safetensors`` (counts, labels, actions) atomically.

        The proposition predicates are stored as their truth table, so :meth:`load` needs
        only the measure function (code is never serialised).
        """
        from safetensors.numpy import save_file

        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        tensors: dict[str, np.ndarray] = {
            "counts": np.ascontiguousarray(self.counts.counts, dtype=np.int64),
            "labels": np.ascontiguousarray(self.abstraction.label_matrix, dtype=np.uint8),
            "actions": np.ascontiguousarray(self.actions.vectors, dtype=np.float64),
        }
        with atomic_path(out / TENSORS_NAME) as tmp:
            save_file(tensors, str(tmp))
        write_json(
            out / CONFIG_NAME,
            {
                "format": FORMAT,
                "config": self.config.to_dict(),
                "propositions": list(self.abstraction.propositions),
                "key": self.abstraction.key,
            },
        )
        return out

    @classmethod
    def load(
        cls, folder: str | os.PathLike[str], *, measure: Measure | None = None
    ) -> RobustShield:
        """Read a shield written by :meth:`save` (counts, labels, actions, config).

        Args:
            folder: The folder.
            measure: Observation -> measurement vector (default ``obs[key]`` as saved).

        Raises:
            CheckpointError: missing, damaged or inconsistent files (naming the file).
        """
        path = Path(folder)
        meta = read_json_file(path / CONFIG_NAME, what="shield config", fix=RESAVE_FIX)
        if meta.get("format") != FORMAT:
            raise CheckpointError(
                f"shield config {str(path / CONFIG_NAME)!r} has format {meta.get('format')!r}, "
                f"expected {FORMAT!r}",
                fix=RESAVE_FIX,
            )
        tensors = load_safetensors_file(
            path / TENSORS_NAME, what="shield tensors", fix=RESAVE_FIX, framework="np"
        )

        def build() -> RobustShield:
            config = ShieldConfig.from_dict(meta["config"])
            names = list(meta["propositions"])
            labels = np.asarray(tensors["labels"], dtype=bool)
            props = {name: labels[:, j] for j, name in enumerate(names)}
            abstraction = Abstraction(
                config.bins, props, measure=measure, key=str(meta.get("key", "state"))
            )
            actions = ActionSet(tensors["actions"])
            counts = TransitionCounts(abstraction.n_states, len(actions), tensors["counts"])
            return cls(config, abstraction, actions, counts)

        return build_from_file(path, build, what="shield", fix=RESAVE_FIX)


class ShieldFilter:
    """:class:`~embodied.contracts.ActionFilter` that enforces a :class:`RobustShield`.

    Each call reads the abstract state of ``obs`` (moving the shield's DFA state), maps the
    proposed action to the nearest discrete action and, when that one is blocked, returns
    the allowed action closest to the proposal instead. The returned action is always an
    element of the action set: the shield's guarantee is about those actions.

    Args:
        shield: The shield (its tracked state is driven by this filter).
        learn: Count each observed transition ``(s, a, s')`` into the shield (call
            ``shield.refresh()`` to use them).

    Attributes:
        interventions: Actions replaced since :meth:`reset`.
        steps: Calls since :meth:`reset`.
    """

    def __init__(self, shield: RobustShield, *, learn: bool = False) -> None:
        self.shield = shield
        self.learn = learn
        self.reset()

    def reset(self) -> None:
        """Episode start: forget the tracked state and the last action."""
        self.shield.current = None
        self._last: tuple[int, int] | None = None  # (abstract state, action index)
        self.interventions = 0
        self.steps = 0

    def track(self, obs: Any) -> ProductState:
        """Move the shield to the abstract state of ``obs`` (learning the transition)."""
        s = self.shield.abstraction.state_of(obs)
        if self.shield.current is None:
            return self.shield.reset(s)
        if self.learn and self._last is not None:
            self.shield.observe(self._last[0], self._last[1], s)
        return self.shield.advance(s)

    def choose(self, action: Any) -> int:
        """Index of the action to execute for proposal ``action`` in the tracked state."""
        if self.shield.current is None:
            raise ConfigError("ShieldFilter.choose before track(obs)", fix="call track(obs)")
        actions = self.shield.actions
        mask = self.shield.allowed()
        i = actions.nearest(action)
        if not mask[i]:
            i = actions.nearest(action, mask)
            self.interventions += 1
        self.steps += 1
        self._last = (self.shield.current[0], i)
        return i

    def __call__(self, action: np.ndarray, obs: Any) -> np.ndarray:
        """The shielded action for proposal ``action`` in observation ``obs``."""
        self.track(obs)
        return self.shield.actions[self.choose(action)].astype(np.float64)

    def action_masks(self, env: gym.Env[Any, Any] | None = None) -> np.ndarray:
        """(A,) allowed-action mask of the tracked state (``ActionMasker`` signature).

        ``env`` is ignored: the state comes from the observations this filter tracked (wrap
        the env with :class:`ShieldedEnv` so every reset and step is tracked).
        """
        del env  # the mask depends on the tracked product state only
        return self.shield.allowed()


class ShieldedEnv(gym.Wrapper[Any, Any, Any, Any]):
    """Gymnasium wrapper: tracks observations with a :class:`ShieldFilter` and enforces it.

    Actions of a ``Discrete`` space are passed on as the chosen index; others as the chosen
    action vector. ``info["shield_intervened"]`` says whether the action was replaced, and
    :meth:`action_masks` makes the env usable with sb3-contrib's MaskablePPO directly.

    Args:
        env: The gymnasium env.
        shield_filter: The filter (and its shield) to apply.
    """

    def __init__(self, env: gym.Env[Any, Any], shield_filter: ShieldFilter) -> None:
        super().__init__(env)
        self.shield_filter = shield_filter

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the env and start tracking its first observation."""
        obs, info = self.env.reset(seed=seed, options=options)
        self.shield_filter.reset()
        self.shield_filter.track(obs)
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Execute the shielded version of ``action`` and track the next observation."""
        before = self.shield_filter.interventions
        i = self.shield_filter.choose(action)
        vector = self.shield_filter.shield.actions[i]
        out = i if isinstance(self.env.action_space, gym.spaces.Discrete) else vector
        obs, reward, terminated, truncated, info = self.env.step(out)
        self.shield_filter.track(obs)
        info = {**info, "shield_intervened": self.shield_filter.interventions > before}
        return obs, reward, terminated, truncated, info

    def action_masks(self) -> np.ndarray:
        """(A,) allowed actions in the current state (what MaskablePPO looks for)."""
        return self.shield_filter.action_masks()
