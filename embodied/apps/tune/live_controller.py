"""A switchable controller whose type and gains change while the loop runs, bumplessly."""

from __future__ import annotations

import inspect
import math
import threading
from collections.abc import Callable, Mapping
from typing import Any

from embodied.contracts import Controller

Builder = Callable[[str, dict[str, Any]], Controller]


class LiveController:
    """The controller the tuning session puts into :class:`embodied.loop.Steering`.

    It delegates to one of several controllers (``fixed``, ``pid``, ``rl``) or, in mode
    ``off``, holds the knob at its neutral value. Changes are bumpless:

    * gain changes go through the controller's ``set_gains`` (which rescales its integrator so
      the output does not jump) when it has one;
    * switching type hands the new controller the last output (``bumpless(output)`` or
      ``set_output``) when it supports it, so the knob continues from where it was.

    Only the session's loop thread calls the mutating methods (between control steps);
    :meth:`params_snapshot` may be called from any thread.

    Args:
        build: ``build(type, params) -> Controller`` (``controllers.make``).
        params: Initial parameters per controller type.
        neutral: Knob value in mode ``off`` and before the first update.
        mode: Initial mode: ``off``, ``fixed``, ``pid`` or ``rl``.
        clamp: Output range enforced on every command (the knob bounds), guarding the loop
            against controllers loaded with wider limits; None disables it.
    """

    def __init__(
        self,
        build: Builder,
        params: Mapping[str, Mapping[str, Any]],
        neutral: float,
        mode: str = "pid",
        clamp: tuple[float, float] | None = None,
    ) -> None:
        self.clamp = clamp
        self._lock = threading.RLock()
        self._build = build
        self.params: dict[str, dict[str, Any]] = {k: dict(v) for k, v in params.items()}
        self.neutral = float(neutral)
        self._instances: dict[str, Controller] = {}
        self.mode = "off"
        self.last_output = self.neutral
        self.set_mode(mode)

    # -- Controller contract -------------------------------------------------------------
    def reset(self) -> None:
        """Start a new episode: reset the active controller, output back to neutral."""
        for ctrl in self._instances.values():
            ctrl.reset()
        self.last_output = self.neutral

    def update(self, measurement: float, setpoint: float, dt: float) -> float:
        """One control step (see :class:`embodied.contracts.Controller`)."""
        if self.mode == "off":
            out = self.neutral
        else:
            out = float(self._instances[self.mode].update(measurement, setpoint, dt))
            if self.clamp is not None:
                out = min(max(out, self.clamp[0]), self.clamp[1])
        if math.isfinite(out):
            self.last_output = out
        return out

    # -- live changes --------------------------------------------------------------------
    def controller(self, ctype: str) -> Controller:
        """The instance of ``ctype``, built from its current parameters on first use."""
        if ctype not in self._instances:
            self._instances[ctype] = self._build(ctype, dict(self.params.get(ctype, {})))
        return self._instances[ctype]

    def params_snapshot(self) -> dict[str, dict[str, Any]]:
        """A copy of the parameters of every controller type (thread-safe)."""
        with self._lock:
            return {k: dict(v) for k, v in self.params.items()}

    def set_mode(self, ctype: str, params: Mapping[str, Any] | None = None) -> None:
        """Switch to ``ctype`` (``off`` included), continuing from the last output."""
        with self._lock:
            self._set_mode(ctype, params)

    def _set_mode(self, ctype: str, params: Mapping[str, Any] | None) -> None:
        if params is not None:
            self.params[ctype] = {**self.params.get(ctype, {}), **params}
            self._instances.pop(ctype, None)
        if ctype != "off":
            ctrl = self.controller(ctype)
            _handover(ctrl, self.last_output)
        self.mode = ctype

    def set_params(self, ctype: str, changes: Mapping[str, Any]) -> None:
        """Apply validated parameter ``changes`` to ``ctype`` (live and bumpless if active)."""
        with self._lock:
            self._set_params(ctype, changes)

    def _set_params(self, ctype: str, changes: Mapping[str, Any]) -> None:
        self.params[ctype] = {**self.params.get(ctype, {}), **changes}
        ctrl = self._instances.get(ctype)
        if ctrl is None:
            return
        setter = getattr(ctrl, "set_gains", None)
        if callable(setter):
            setter(**changes)
        else:  # no live setter: rebuild and hand the output over
            self._instances[ctype] = self._build(ctype, dict(self.params[ctype]))
            if ctype == self.mode:
                _handover(self._instances[ctype], self.last_output)

    def active(self) -> Controller | None:
        """The controller in charge, or None in mode ``off``."""
        return None if self.mode == "off" else self._instances.get(self.mode)

    def state(self) -> dict[str, float]:
        """Telemetry of the active controller (its ``state()``: terms, integrator, ...)."""
        ctrl = self.active()
        getter = getattr(ctrl, "state", None)
        if not callable(getter):
            return {}
        out: dict[str, float] = {}
        for key, value in dict(getter()).items():
            try:
                num = float(value)
            except (TypeError, ValueError):
                continue
            if math.isfinite(num):
                out[key] = num
        return out


def _handover(ctrl: Controller, output: float) -> None:
    """Tell ``ctrl`` the output it takes over from, if it supports bumpless transfer.

    Controllers whose ``reset`` takes ``output`` (the PID preloads its integrator so that zero
    error holds it) continue from ``output``; others (fixed, rl) start as they are.
    """
    try:
        params = inspect.signature(ctrl.reset).parameters
    except (TypeError, ValueError):
        return
    if "output" in params:
        ctrl.reset(output=output)  # type: ignore[call-arg]
