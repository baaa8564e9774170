"""Step-response analysis: rise time, overshoot and settling time of a recorded signal.

Used by the tuning page's step-response experiment and by the steering experiment's tables.
Crossing times are linearly interpolated between samples, so coarse control rates still
give sub-sample estimates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from embodied.errors import ConfigError


@dataclass(frozen=True)
class StepResponse:
    """Figures of one step response (times in seconds from the step).

    Attributes:
        rise_time_s: Time from 10 % to 90 % of the step (NaN if 90 % is never reached).
        overshoot_pct: Peak excursion beyond the reference, in % of the step size (>= 0).
        settling_time_s: Time after which the signal stays within ``band`` of the reference
            (NaN if it never settles before the end of the record).
        peak: Extreme value reached in the step direction.
        peak_time_s: When it was reached.
        final_value: The reference the figures are relative to.
        steady_state_error: Reference setpoint minus the mean of the last 10 % of samples.
        step_size: Reference minus initial value.
    """

    rise_time_s: float
    overshoot_pct: float
    settling_time_s: float
    peak: float
    peak_time_s: float
    final_value: float
    steady_state_error: float
    step_size: float

    def to_dict(self) -> dict[str, float | None]:
        """JSON-friendly dict (NaN -> None)."""
        return {
            k: (None if isinstance(v, float) and math.isnan(v) else v)
            for k, v in asdict(self).items()
        }


def _first_crossing(t: np.ndarray, x: np.ndarray, level: float) -> float:
    """First time the (increasing-direction) signal ``x`` reaches ``level``, interpolated."""
    idx = np.flatnonzero(x >= level)
    if idx.size == 0:
        return math.nan
    i = int(idx[0])
    if i == 0:
        return float(t[0])
    x0, x1 = x[i - 1], x[i]
    frac = (level - x0) / (x1 - x0) if x1 != x0 else 0.0
    return float(t[i - 1] + frac * (t[i] - t[i - 1]))


def step_response(
    t: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    setpoint: float,
    *,
    initial: float | None = None,
    step_time: float | None = None,
    band: float = 0.02,
    relative_to: str = "setpoint",
) -> StepResponse:
    """Analyse the response ``y(t)`` to a setpoint step.

    Args:
        t: Sample times in seconds (increasing).
        y: Measured signal at those times.
        setpoint: The setpoint after the step.
        initial: Value before the step; default ``y`` at ``step_time``.
        step_time: When the step happened; default ``t[0]``. Samples before it are ignored.
        band: Settling band as a fraction of the step size (0.02 = 2 %).
        relative_to: ``"setpoint"`` (figures relative to the commanded value) or ``"final"``
            (relative to the mean of the last 10 % of samples: the classical definition for
            loops with steady-state error).

    Raises:
        ConfigError: mismatched/short inputs, a zero step, or bad options.
    """
    tt = np.asarray(t, dtype=np.float64).ravel()
    yy = np.asarray(y, dtype=np.float64).ravel()
    if tt.shape != yy.shape or tt.size < 3:
        raise ConfigError(
            f"step_response needs t and y of equal length >= 3, got {tt.size} and {yy.size}"
        )
    if not (np.isfinite(tt).all() and np.all(np.diff(tt) > 0)):
        raise ConfigError("step_response: t must be finite and strictly increasing")
    if not 0 < band < 1:
        raise ConfigError(f"step_response band must be in (0, 1), got {band}")
    if relative_to not in ("setpoint", "final"):
        raise ConfigError(f"relative_to must be 'setpoint' or 'final', got {relative_to!r}")
    t0 = float(tt[0]) if step_time is None else float(step_time)
    keep = tt >= t0
    tt, yy = tt[keep] - t0, yy[keep]
    finite = np.isfinite(yy)
    tt, yy = tt[finite], yy[finite]
    if tt.size < 3:
        raise ConfigError(f"step_response: fewer than 3 finite samples after t={t0}")
    y0 = float(yy[0]) if initial is None else float(initial)
    tail = yy[-max(1, yy.size // 10) :]
    tail_mean = float(tail.mean())
    ref = float(setpoint) if relative_to == "setpoint" else tail_mean
    step = ref - y0
    if step == 0 or not math.isfinite(step):
        raise ConfigError(
            f"step_response: zero step (initial {y0} equals reference {ref})",
            fix="pass the value before the step as `initial`",
        )
    sign = 1.0 if step > 0 else -1.0
    x = (yy - y0) * sign  # normalised: rises from 0 towards |step|
    mag = abs(step)
    rise = _first_crossing(tt, x, 0.9 * mag) - _first_crossing(tt, x, 0.1 * mag)
    i_peak = int(np.argmax(x))
    peak = float(yy[i_peak])
    overshoot = max(0.0, (float(x[i_peak]) - mag) / mag * 100.0)
    outside = np.flatnonzero(np.abs(yy - ref) > band * mag)
    if outside.size == 0:
        settling = 0.0
    elif outside[-1] == yy.size - 1:
        settling = math.nan
    else:
        j = int(outside[-1])  # last sample outside; interpolate the band entry after it
        dev0, dev1 = abs(yy[j] - ref), abs(yy[j + 1] - ref)
        lim = band * mag
        frac = (dev0 - lim) / (dev0 - dev1) if dev0 != dev1 else 1.0
        settling = float(tt[j] + frac * (tt[j + 1] - tt[j]))
    return StepResponse(
        rise_time_s=float(rise),
        overshoot_pct=float(overshoot),
        settling_time_s=settling,
        peak=peak,
        peak_time_s=float(tt[i_peak]),
        final_value=ref,
        steady_state_error=float(setpoint) - tail_mean,
        step_size=step,
    )


def tracking_rmse(
    measurements: Sequence[float] | np.ndarray,
    setpoints: Sequence[float] | np.ndarray,
    skip: int = 0,
) -> float:
    """Root-mean-square tracking error over the finite samples after the first ``skip``."""
    m = np.asarray(measurements, dtype=np.float64)[skip:]
    s = np.asarray(setpoints, dtype=np.float64)[skip:]
    if m.shape != s.shape:
        raise ConfigError(f"tracking_rmse: shapes differ {m.shape} vs {s.shape}")
    ok = np.isfinite(m) & np.isfinite(s)
    if not ok.any():
        return math.nan
    return float(np.sqrt(np.mean((m[ok] - s[ok]) ** 2)))
