"""A constant-output controller: the fixed-coefficient (open-loop) steering baseline."""

from __future__ import annotations

import math
from typing import Any

from controllers import CONTROLLERS
from embodied.errors import ConfigError


class FixedController:
    """Returns ``value`` every step, ignoring the measurement (e.g. a fixed alpha).

    Implements :class:`embodied.contracts.Controller`.

    Args:
        value: The constant command (e.g. steering strength alpha).
    """

    type_name = "fixed"

    def __init__(self, value: float = 0.0) -> None:
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            raise ConfigError(f"fixed controller value must be a finite number, got {value!r}")
        self.value = float(value)

    def reset(self) -> None:
        """Nothing to clear."""

    def update(self, measurement: float, setpoint: float, dt: float) -> float:
        """Return the constant ``value``."""
        if not dt > 0.0:
            raise ConfigError(f"controller update needs dt > 0 s, got {dt!r}", fix="pass env.dt")
        return self.value

    def set_gains(self, **changes: Any) -> None:
        """Change ``value`` at run time (the tuning UI's generic entry point)."""
        unknown = sorted(set(changes) - {"value"})
        if unknown:
            raise ConfigError(f"unknown fixed-controller parameter(s) {unknown}", fix="use value")
        if "value" in changes:
            self.value = FixedController(changes["value"]).value

    def state(self) -> dict[str, float]:
        """Telemetry."""
        return {"output": self.value}

    def to_config(self) -> dict[str, Any]:
        """Parameters for ``controllers.save``."""
        return {"value": self.value}

    def __repr__(self) -> str:
        return f"FixedController(value={self.value})"


@CONTROLLERS.register("fixed")
def make_fixed(value: float = 0.0) -> FixedController:
    """Constant output (fixed-alpha baseline)."""
    return FixedController(value)
