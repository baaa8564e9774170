"""Step-response analysis and model-based PI tuning, in one place for the tuning page, the
``tune``/``sweep`` commands and the steering experiment's tables.

- :func:`step_response`: 10-90 % rise time, overshoot, settling time in a band (2 % by
  default), steady-state error, IAE and ITAE of a recorded step (standard definitions; crossing
  times interpolated between samples, so coarse control rates still give sub-sample estimates).
- :func:`tracking_rmse`, :func:`steady_state_rmse`: RMS tracking error over the whole record,
  and once the transients after the start and after each setpoint change are over.
- :class:`SettledStep`: a setpoint schedule that steps only once the signal has settled at the
  start value (band and dwell stated), so a step test never measures from a transient.
- :func:`fit_fopdt`, :func:`simc_pi`, :func:`loop_margins`: a first-order-plus-dead-time model
  fitted to an open-loop bump test, Skogestad's SIMC PI rule for it, and the gain and phase
  margins of the resulting loop.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
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
        iae: Integral of |setpoint - y| dt after the step (signal units x s).
        itae: Integral of t |setpoint - y| dt after the step (signal units x s^2).
    """

    rise_time_s: float
    overshoot_pct: float
    settling_time_s: float
    peak: float
    peak_time_s: float
    final_value: float
    steady_state_error: float
    step_size: float
    iae: float = math.nan
    itae: float = math.nan

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
    min_step: float = 0.0,
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
        min_step: Smallest step to analyse, in the units of ``y``: a start already within
            ``min_step`` of the setpoint (e.g. inside its settling band) makes no step to
            measure, and its overshoot would be a ratio of noise.

    Raises:
        ConfigError: mismatched/short inputs, a zero step, a step of at most ``min_step``,
            or bad options.
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
    if not (math.isfinite(min_step) and min_step >= 0):
        raise ConfigError(
            f"step_response min_step must be finite and >= 0, got {min_step}",
            fix="pass e.g. band * abs(setpoint), or 0",
        )
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
    # equal up to rounding (0.15 read back as 0.14999999999999997) is no step either: dividing
    # by that difference made overshoots of 1e16 %
    if not math.isfinite(step) or math.isclose(ref, y0, rel_tol=1e-9, abs_tol=1e-12):
        raise ConfigError(
            f"step_response: zero step (initial {y0} equals reference {ref})",
            fix="pass the value before the step as `initial`",
        )
    if min_step > 0 and not abs(float(setpoint) - y0) > min_step:
        raise ConfigError(
            f"step_response: the step from {y0} to the setpoint {setpoint} is within "
            f"min_step {min_step}: no step to measure"
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
    err = np.abs(float(setpoint) - yy)
    iae = float(np.trapezoid(err, tt))
    itae = float(np.trapezoid(tt * err, tt))
    return StepResponse(
        rise_time_s=float(rise),
        overshoot_pct=float(overshoot),
        settling_time_s=settling,
        peak=peak,
        peak_time_s=float(tt[i_peak]),
        final_value=ref,
        steady_state_error=float(setpoint) - tail_mean,
        step_size=step,
        iae=iae,
        itae=itae,
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
    return _rmse(m, s, np.ones(m.shape, dtype=bool))


def _rmse(m: np.ndarray, s: np.ndarray, keep: np.ndarray) -> float:
    """RMS of ``m - s`` over the kept samples where both are finite; NaN when none is."""
    keep = keep & np.isfinite(m) & np.isfinite(s)
    if not keep.any():
        return math.nan
    return float(np.sqrt(np.mean((m[keep] - s[keep]) ** 2)))


def steady_state_rmse(
    measurements: Sequence[float] | np.ndarray,
    setpoints: Sequence[float] | np.ndarray,
    rate_hz: float,
    transient_s: float,
) -> float:
    """RMS tracking error once the transients are over: the samples less than ``transient_s``
    after the episode's start or after any change of the setpoint are left out.

    The whole-record :func:`tracking_rmse` of a run that starts from rest is dominated by the
    rise from 0, which no controller can avoid (even a plant driven at exactly the setpoint
    speed rises through it); this figure is the steady-state tracking error beside it.

    Args:
        measurements: The measured signal, one sample per control step.
        setpoints: The setpoint at each step (same length).
        rate_hz: Control rate (Hz).
        transient_s: Time left out after the start and after each setpoint change (s).

    Returns:
        The RMSE over the kept finite samples; NaN when none is kept.
    """
    m = np.asarray(measurements, dtype=np.float64)
    s = np.asarray(setpoints, dtype=np.float64)
    if m.shape != s.shape or m.ndim != 1:
        raise ConfigError(f"steady_state_rmse: shapes differ or are not 1-D {m.shape} vs {s.shape}")
    if not rate_hz > 0 or not transient_s >= 0:
        raise ConfigError(
            f"steady_state_rmse: rate_hz={rate_hz}, transient_s={transient_s}",
            fix="use rate_hz > 0 and transient_s >= 0",
        )
    skip = math.ceil(transient_s * rate_hz - 1e-9)
    keep = np.ones(m.shape, dtype=bool)
    starts = [0, *(np.flatnonzero(np.diff(s) != 0) + 1).tolist()]
    for k in starts:
        keep[k : k + skip] = False
    return _rmse(m, s, keep)


class SettledStep:
    """Setpoint schedule of a step test that steps only after the signal has settled.

    The setpoint is ``start`` until the measurement has stayed within ``band`` of ``start`` for
    ``dwell_s`` seconds (and at least ``min_hold_s`` have passed), then ``end``. If it never
    settles, the step happens at ``timeout_s`` and :attr:`settled` stays False, so the result
    can say that its start was not settled. Feed every measurement to :meth:`observe`.

    Args:
        start: Setpoint before the step (signal units).
        end: Setpoint after the step.
        band: Absolute half-width of the settled band around ``start`` (signal units).
        dwell_s: Time the signal must stay in the band (s).
        timeout_s: Step at this time even if not settled (s).
        min_hold_s: Earliest step time (s).
    """

    def __init__(
        self,
        start: float,
        end: float,
        band: float,
        dwell_s: float,
        timeout_s: float,
        min_hold_s: float = 0.0,
    ) -> None:
        if not (band > 0 and dwell_s >= 0 and timeout_s >= max(dwell_s, min_hold_s)):
            raise ConfigError(
                f"settled step: band {band} must be > 0 and timeout_s {timeout_s} >= dwell_s "
                f"{dwell_s} and min_hold_s {min_hold_s}",
                fix="e.g. band=0.05*|step|, dwell_s=0.5, timeout_s=5",
            )
        self.start, self.end = float(start), float(end)
        self.band, self.dwell_s = float(band), float(dwell_s)
        self.timeout_s, self.min_hold_s = float(timeout_s), float(min_hold_s)
        self.step_time_s: float | None = None
        self.settled = False
        self._inside_since: float | None = None

    def __call__(self, t_s: float) -> float:
        """The setpoint at episode time ``t_s``."""
        if self.step_time_s is None and t_s >= self.timeout_s:
            self.step_time_s = float(t_s)  # gave up waiting: step now, start not settled
        return self.end if self.step_time_s is not None and t_s >= self.step_time_s else self.start

    def observe(self, t_s: float, y: float) -> None:
        """Record the measurement ``y`` at time ``t_s``; schedules the step once settled."""
        if self.step_time_s is not None:
            return
        if not (math.isfinite(y) and abs(y - self.start) <= self.band):
            self._inside_since = None
            return
        if self._inside_since is None:
            self._inside_since = float(t_s)
        if t_s - self._inside_since >= self.dwell_s and t_s >= self.min_hold_s:
            self.settled = True
            self.step_time_s = float(t_s)  # the next control step gets the new setpoint


@dataclass(frozen=True)
class FOPDT:
    """First-order-plus-dead-time model ``K e^(-theta s) / (tau s + 1)``.

    Attributes:
        gain: Static gain K (output units per input unit).
        tau_s: Time constant (s).
        theta_s: Dead time (s).
    """

    gain: float
    tau_s: float
    theta_s: float


def fit_fopdt(
    t: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    step_time: float,
    du: float,
) -> FOPDT:
    """Fit an FOPDT model to an open-loop response to an input step ``du`` at ``step_time``.

    Two-point method (Smith 1972): the times at which the response reaches 28.3 % and 63.2 % of
    its final change give ``tau = 1.5 (t63 - t28)`` and ``theta = t63 - tau``; the gain is the
    final change (mean of the last 10 % of samples) over ``du``.

    Raises:
        ConfigError: Mismatched inputs, a zero input step, or a response that does not move.
    """
    tt = np.asarray(t, dtype=np.float64).ravel()
    yy = np.asarray(y, dtype=np.float64).ravel()
    if tt.shape != yy.shape or not du or not math.isfinite(du):
        raise ConfigError(f"fit_fopdt needs t, y of equal length and a non-zero du, got du={du}")
    before = yy[(tt < step_time) & np.isfinite(yy)]
    keep = (tt >= step_time) & np.isfinite(yy)
    tt, yy = tt[keep] - step_time, yy[keep]
    if tt.size < 5:
        raise ConfigError("fit_fopdt: fewer than 5 samples after the input step")
    y0 = float(before[-max(1, before.size // 4) :].mean()) if before.size else float(yy[0])
    dy = float(yy[-max(1, yy.size // 10) :].mean()) - y0
    if abs(dy) <= 1e-9 * max(1.0, abs(y0)):
        raise ConfigError(
            "fit_fopdt: the response did not move after the input step",
            fix="use a larger bump (du) or a longer record",
        )
    x = (yy - y0) / dy
    t28, t63 = _first_crossing(tt, x, 0.283), _first_crossing(tt, x, 0.632)
    tau = 1.5 * (t63 - t28)
    theta = max(0.0, t63 - tau)
    return FOPDT(gain=dy / du, tau_s=max(tau, 1e-6), theta_s=theta)


def simc_pi(model: FOPDT, tau_c_s: float | None = None) -> dict[str, float]:
    """Skogestad's SIMC PI gains for an FOPDT model (parallel form ``kp e + ki int e``).

    ``kc = tau / (K (tau_c + theta))``, ``tau_I = min(tau, 4 (tau_c + theta))``, ``ki = kc /
    tau_I``; ``tau_c`` (closed-loop time constant) defaults to ``theta`` ("tight control"), or
    ``tau / 2`` for a model without dead time. The sign of K goes to ``direction``.

    Returns:
        ``{"kp", "ki", "direction", "tau_c_s"}``.
    """
    tc = (
        tau_c_s
        if tau_c_s is not None
        else (model.theta_s if model.theta_s > 0 else model.tau_s / 2)
    )
    kc = model.tau_s / (abs(model.gain) * (tc + model.theta_s))
    tau_i = min(model.tau_s, 4.0 * (tc + model.theta_s))
    return {"kp": kc, "ki": kc / tau_i, "direction": 1.0 if model.gain > 0 else -1.0, "tau_c_s": tc}


def loop_margins(
    loop: Callable[[np.ndarray], np.ndarray],
    w_min: float = 1e-3,
    w_max: float = 1e3,
    n: int = 20000,
) -> dict[str, float]:
    """Gain and phase margins of an open-loop frequency response ``L(j w)``.

    Args:
        loop: Maps angular frequencies (rad/s) to complex ``L(j w)``.
        w_min: Lowest frequency searched (rad/s).
        w_max: Highest frequency searched (rad/s).
        n: Log-spaced grid points (crossings refined by linear interpolation).

    Returns:
        ``{"gain_margin", "gain_margin_db", "phase_margin_deg", "gain_crossover_rad_s",
        "phase_crossover_rad_s"}``; a margin is ``inf`` when its crossover is not in the range.
    """
    w = np.logspace(math.log10(w_min), math.log10(w_max), n)
    resp = np.asarray(loop(w), dtype=np.complex128)
    mag = np.abs(resp)
    phase = np.unwrap(np.angle(resp))
    out = {
        "gain_margin": math.inf,
        "gain_margin_db": math.inf,
        "phase_margin_deg": math.inf,
        "gain_crossover_rad_s": math.nan,
        "phase_crossover_rad_s": math.nan,
    }
    down = np.flatnonzero((mag[:-1] >= 1) & (mag[1:] < 1))
    if down.size:
        i = int(down[0])
        f = (mag[i] - 1) / (mag[i] - mag[i + 1])
        wc = w[i] + f * (w[i + 1] - w[i])
        ph = phase[i] + f * (phase[i + 1] - phase[i])
        out["gain_crossover_rad_s"] = float(wc)
        out["phase_margin_deg"] = float(180.0 + math.degrees(ph))
    cross = np.flatnonzero((phase[:-1] > -math.pi) & (phase[1:] <= -math.pi))
    if cross.size:
        i = int(cross[0])
        f = (phase[i] + math.pi) / (phase[i] - phase[i + 1])
        wp = w[i] + f * (w[i + 1] - w[i])
        m = mag[i] + f * (mag[i + 1] - mag[i])
        out["phase_crossover_rad_s"] = float(wp)
        out["gain_margin"] = float(1.0 / m)
        out["gain_margin_db"] = float(-20.0 * math.log10(m))
    return out


def pi_fopdt_margins(kp: float, ki: float, model: FOPDT) -> dict[str, float]:
    """:func:`loop_margins` of a PI controller ``kp + ki / s`` on the FOPDT ``model`` (the
    controller's direction taken to match the sign of K)."""

    def loop(w: np.ndarray) -> np.ndarray:
        s_ = 1j * w
        plant = abs(model.gain) * np.exp(-model.theta_s * s_) / (model.tau_s * s_ + 1)
        return (kp + ki / s_) * plant

    return loop_margins(loop)
