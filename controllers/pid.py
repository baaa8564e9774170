"""A PID controller for closed-loop knob steering.

Features (all dt-aware, so the continuous-time behaviour does not depend on the control rate):

* derivative on the measurement (no derivative kick on a setpoint step), low-pass filtered
  with a first-order filter of time constant ``tau_d`` seconds (or a cutoff in Hz);
* anti-windup by clamping (conditional integration) or back-calculation with a tracking gain;
* output limits and a rate limit (output units per second);
* bumpless gain changes at run time: :meth:`PIDController.set_gains` moves the integrator so
  the output does not jump (thread-safe: a UI thread may call it while the loop runs);
* direction (reverse acting), a constant bias, a setpoint feedforward gain and a lookup-table
  feedforward (a measured static inverse of the plant, for a plant whose gain is not constant);
* a reference filter for two-degree-of-freedom control: the feedback acts on the setpoint
  filtered to the response the plant is expected to give (time constant ``setpoint_tau_s``,
  starting from the first measurement), while the feedforward acts on the setpoint itself, so
  a plant that starts from rest does not wind the integrator up while it rises.

The control law, with error ``e = r - measurement`` and direction ``s`` (+1 or -1)::

    r     = setpoint, or with setpoint_tau_s > 0: r += (setpoint - r) dt / (setpoint_tau_s + dt)
            (r starts at the first measurement)
    u_raw = bias + kff * setpoint + ff(setpoint) + s * (kp * e + I - kd * dy_f)
    I    += ki * e * dt                       (integrator, kept in output units)
    dy_f  = (tau_d * dy_f + (y - y_prev)) / (tau_d + dt)   (filtered dy/dt, backward Euler)
    ff    = piecewise-linear through feedforward_table, held at its ends (0 without a table)
    u     = rate_limit(clip(u_raw, output_min, output_max))

The hot path is plain Python float arithmetic (no numpy): one ``update`` costs a few
microseconds (``embodied bench controllers``).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import threading
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from controllers import CONTROLLERS
from embodied.config import Rule, checked, config_from_dict, config_to_dict, validate
from embodied.errors import ConfigError

AntiWindup = Literal["clamping", "back_calculation", "none"]
_ANTI_WINDUP = ("clamping", "back_calculation", "none")
_NO_NEGATIVE_GAINS = "use direction=-1 for a reverse-acting loop instead of negative gains"


@dataclass
class PIDConfig:
    """Gains and limits of a :class:`PIDController`.

    Args:
        kp: Proportional gain (output units per measurement unit), >= 0.
        ki: Integral gain (output units per measurement unit per second), >= 0.
        kd: Derivative gain (output units per measurement unit per 1/s), >= 0.
        output_min: Lower output limit (e.g. the knob's low bound).
        output_max: Upper output limit.
        rate_limit: Largest output change in output units per second; None = unlimited.
        tau_d: Derivative low-pass time constant in seconds (0 = unfiltered).
        derivative_cutoff_hz: Alternative to ``tau_d``: the filter's -3 dB cutoff in Hz;
            when given, ``tau_d`` is derived as ``1 / (2 pi f_c)``.
        anti_windup: ``"clamping"`` (stop integrating while the output is limited and the
            error pushes further into the limit), ``"back_calculation"`` (bleed the integrator
            by ``tracking_gain * (u_applied - u_raw)``), or ``"none"``.
        tracking_gain: Back-calculation gain in 1/s; None derives ``ki / kp`` (1 / integral
            time) or 10 1/s when ``kp`` is 0.
        direction: +1 (output rises when the measurement is below the setpoint) or -1.
        bias: Constant output offset (the output at zero error, before any integral action).
        kff: Setpoint feedforward gain (output units per setpoint unit).
        feedforward_table: ``(setpoint, output)`` points, setpoints strictly increasing, of a
            feedforward interpolated linearly between them and held at the end points, added
            to ``bias + kff * setpoint``: a static inverse of the plant measured point by point
            (e.g. a sweep of fixed commands), for a plant whose gain changes over its range
            (a gain-scheduled feedforward); empty: none.
        setpoint_tau_s: Time constant (s) of the reference filter the feedback acts on: the
            response expected of the plant to a setpoint step, from the first measurement;
            the feedforward terms use the setpoint itself. 0: the feedback acts on the
            setpoint (one degree of freedom).
    """

    config_name: ClassVar[str] = "PID"

    kp: float = checked(1.0, ge=0, fix=_NO_NEGATIVE_GAINS)
    ki: float = checked(0.0, ge=0, fix=_NO_NEGATIVE_GAINS)
    kd: float = checked(0.0, ge=0, fix=_NO_NEGATIVE_GAINS)
    output_min: float = checked(-math.inf, finite=False, fix="give a number (-inf allowed)")
    output_max: float = checked(math.inf, finite=False, fix="give a number (inf allowed)")
    rate_limit: float | None = checked(
        None, gt=0, finite=False, fix="omit rate_limit (null) for no rate limit"
    )
    tau_d: float = checked(0.0, ge=0, fix="use a time constant >= 0 s (0 = unfiltered)")
    derivative_cutoff_hz: float | None = checked(None, gt=0, fix="use a cutoff > 0 Hz, or omit it")
    anti_windup: AntiWindup = checked("clamping", choices=_ANTI_WINDUP)
    tracking_gain: float | None = checked(None, gt=0, fix="use a gain > 0 1/s, or omit it")
    direction: int = checked(1, choices=(1, -1), fix="use +1, or -1 for a reverse-acting loop")
    bias: float = checked(0.0, fix="give a finite number")
    kff: float = checked(0.0, fix="give a finite number")
    feedforward_table: tuple[tuple[float, float], ...] = ()
    setpoint_tau_s: float = checked(0.0, ge=0, fix="use a time constant >= 0 s (0 = no filter)")

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "output_min",
            lambda c: c.output_min < c.output_max,
            "must be < output_max={output_max}",
            "swap the limits or widen them",
        ),
    )

    def __post_init__(self) -> None:
        validate(self)
        for name in (
            "kp",
            "ki",
            "kd",
            "tau_d",
            "bias",
            "kff",
            "output_min",
            "output_max",
            "setpoint_tau_s",
        ):
            setattr(self, name, float(getattr(self, name)))
        if self.rate_limit is not None:
            self.rate_limit = float(self.rate_limit)
        if self.derivative_cutoff_hz is not None:
            self.derivative_cutoff_hz = float(self.derivative_cutoff_hz)
            self.tau_d = 1.0 / (2.0 * math.pi * self.derivative_cutoff_hz)
        if self.tracking_gain is not None:
            self.tracking_gain = float(self.tracking_gain)
        self.direction = int(self.direction)
        self.feedforward_table = _checked_table(self.feedforward_table)

    @property
    def effective_tracking_gain(self) -> float:
        """Back-calculation gain in 1/s (``tracking_gain`` or the derived default)."""
        if self.tracking_gain is not None:
            return self.tracking_gain
        return self.ki / self.kp if self.kp > 0 and self.ki > 0 else 10.0

    def to_dict(self) -> dict[str, Any]:
        """Parameters as a plain dict (YAML/JSON-friendly; infinite limits become None)."""
        d = config_to_dict(self)
        for name in ("output_min", "output_max"):
            if math.isinf(d[name]):
                d[name] = None
        if d["derivative_cutoff_hz"] is not None:
            d.pop("tau_d")  # derived
        else:
            d.pop("derivative_cutoff_hz")
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PIDConfig:
        """Inverse of :meth:`to_dict`; unknown keys raise ``ConfigError`` naming them."""
        kw = dict(d)
        if kw.get("output_min") is None:
            kw["output_min"] = -math.inf
        if kw.get("output_max") is None:
            kw["output_max"] = math.inf
        return config_from_dict(cls, kw, what="PID config")


def _checked_table(table: Any) -> tuple[tuple[float, float], ...]:
    """``feedforward_table`` as float pairs; ConfigError naming the bad entry and the fix."""
    fix = "give [[setpoint, output], ...] with finite numbers and strictly increasing setpoints"
    try:
        pts = tuple((float(sp), float(u)) for sp, u in table)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"PID feedforward_table={table!r} is not (setpoint, output) pairs", fix=fix
        ) from exc
    for k, (sp, u) in enumerate(pts):
        if not (math.isfinite(sp) and math.isfinite(u)):
            raise ConfigError(f"PID feedforward_table[{k}]={pts[k]!r} is not finite", fix=fix)
        if k and sp <= pts[k - 1][0]:
            raise ConfigError(
                f"PID feedforward_table[{k}] setpoint {sp!r} does not rise above {pts[k - 1][0]!r}",
                fix=fix,
            )
    return pts


class PIDController:
    """PID controller implementing :class:`embodied.contracts.Controller`.

    Args:
        config: Gains and limits; keyword arguments build one if it is None.
        **params: :class:`PIDConfig` fields (``controllers.make("pid", kp=2.0, ki=0.5)``).
    """

    type_name = "pid"

    def __init__(self, config: PIDConfig | None = None, **params: Any) -> None:
        if config is not None and params:
            raise ConfigError(
                f"pass either a PIDConfig or keyword parameters, not both: {sorted(params)}"
            )
        self.config = config if config is not None else PIDConfig(**params)
        self._lock = threading.Lock()  # set_gains/reset may come from a UI thread
        self._load_config()
        self.reset()

    # -- configuration -------------------------------------------------------------------
    def _load_config(self) -> None:
        c = self.config
        self._kp, self._ki, self._kd = c.kp, c.ki, c.kd
        self._lo, self._hi = c.output_min, c.output_max
        self._rate = c.rate_limit if c.rate_limit is not None else math.inf
        self._tau = c.tau_d
        self._aw = {"none": 0, "clamping": 1, "back_calculation": 2}[c.anti_windup]
        self._kt = c.effective_tracking_gain
        self._dir = float(c.direction)
        self._bias, self._kff = c.bias, c.kff
        self._ref_tau = c.setpoint_tau_s
        self._ff_sp = [p[0] for p in c.feedforward_table]
        self._ff_u = [p[1] for p in c.feedforward_table]

    def _feedforward(self, sp: float) -> float:
        """``bias + kff * sp`` plus the table's value at ``sp`` (held at its ends)."""
        ff = self._bias + self._kff * sp
        xs, ys = self._ff_sp, self._ff_u
        if not xs:
            return ff
        if sp <= xs[0]:
            return ff + ys[0]
        if sp >= xs[-1]:
            return ff + ys[-1]
        k = bisect.bisect_right(xs, sp)
        w = (sp - xs[k - 1]) / (xs[k] - xs[k - 1])
        return ff + ys[k - 1] + w * (ys[k] - ys[k - 1])

    def reset(self, output: float | None = None) -> None:
        """Clear the integrator, derivative filter and previous output.

        Args:
            output: Output to start from: the rate limit ramps from it and the integrator is
                preloaded so that zero error holds it. Default: the bias clipped into the
                output limits, with an empty integrator.
        """
        with self._lock:
            self._reset(output)

    def _reset(self, output: float | None) -> None:
        self._integral = 0.0  # integral term in output units (includes direction)
        self._d_filt = 0.0  # filtered d(measurement)/dt
        self._y_prev = math.nan
        out = self._bias if output is None else float(output)
        self._u = min(max(out, self._lo), self._hi)
        if output is not None:  # preload: zero error holds ``output``
            self._integral = self._u - self._bias
        self._u_raw = self._u
        self._e = 0.0
        self._y = math.nan
        self._sp = math.nan
        self._ref = math.nan  # the filtered setpoint the feedback acts on
        self._held = 0

    def set_gains(self, bumpless: bool = True, **changes: Any) -> None:
        """Change gains/limits at run time without a jump in the output.

        The integrator is moved by the change of the other terms at the last error,
        measurement and setpoint, so the next output continues from the present one.

        Args:
            bumpless: Compensate the integrator (default). False applies the gains as is.
            **changes: :class:`PIDConfig` fields, e.g. ``kp=2.0, output_max=1.0``.

        Raises:
            ConfigError: an unknown field or invalid value (the controller is left unchanged).
        """
        fields = {f.name for f in dataclasses.fields(PIDConfig)}
        unknown = sorted(set(changes) - fields)
        if unknown:
            raise ConfigError(f"unknown PID parameter(s) {unknown}", fix=f"use {sorted(fields)}")
        if "tau_d" in changes and "derivative_cutoff_hz" not in changes:
            changes["derivative_cutoff_hz"] = None
        # to_dict writes an infinite limit as None (YAML/JSON); take it back as from_dict does
        for name, unlimited in (("output_min", -math.inf), ("output_max", math.inf)):
            if name in changes and changes[name] is None:
                changes[name] = unlimited
        new = dataclasses.replace(self.config, **changes)  # validates in __post_init__
        with self._lock:
            before = self._terms_without_integral()
            self.config = new
            self._load_config()
            if bumpless and not math.isnan(self._y):
                self._integral += before - self._terms_without_integral()
            self._u = min(max(self._u, self._lo), self._hi)

    def _terms_without_integral(self) -> float:
        sp = 0.0 if math.isnan(self._sp) else self._sp
        return self._feedforward(sp) + self._dir * (self._kp * self._e - self._kd * self._d_filt)

    # -- the control step ------------------------------------------------------------------
    def update(self, measurement: float, setpoint: float, dt: float) -> float:
        """One control step.

        Args:
            measurement: Measured concept value; a non-finite value holds the last output.
            setpoint: Target value (finite).
            dt: Seconds since the last update (> 0).

        Returns:
            The command (within the output limits and the rate limit).

        Raises:
            ConfigError: ``dt <= 0`` or a non-finite setpoint.
        """
        with self._lock:
            return self._update(measurement, setpoint, dt)

    def _update(self, measurement: float, setpoint: float, dt: float) -> float:
        if not dt > 0.0 or dt == math.inf:
            raise ConfigError(f"PID update needs dt > 0 s, got {dt!r}", fix="pass env.dt")
        if setpoint - setpoint != 0.0:  # NaN or inf
            raise ConfigError(f"PID setpoint must be finite, got {setpoint!r}")
        y = float(measurement)
        if y - y != 0.0:  # sensor dropout: hold the output
            self._held += 1
            return self._u
        sp = float(setpoint)
        ref = sp
        if self._ref_tau > 0.0:
            prev = self._ref
            ref = y if prev != prev else prev + (sp - prev) * dt / (self._ref_tau + dt)
            self._ref = ref
        e = ref - y
        # derivative of the measurement, first-order low-pass (backward Euler)
        y_prev = self._y_prev
        if y_prev == y_prev:  # not NaN
            self._d_filt = (self._tau * self._d_filt + (y - y_prev)) / (self._tau + dt)
        self._y_prev = y
        s = self._dir
        base = self._feedforward(sp) + s * (self._kp * e - self._kd * self._d_filt)
        i_old = self._integral
        i_new = i_old + s * self._ki * e * dt
        u_raw = base + i_new
        u = self._limit(u_raw, dt)
        aw = self._aw
        if aw == 1 and u != u_raw and (i_new - i_old) * (u_raw - u) > 0.0:
            # clamping: the integrator would push further into the limit - hold it
            i_new = i_old
            u_raw = base + i_new
            u = self._limit(u_raw, dt)
        elif aw == 2 and u != u_raw:
            gain = self._kt * dt
            i_new += (u - u_raw) * (gain if gain < 1.0 else 1.0)
        self._integral = i_new
        self._u_raw = u_raw
        self._u = u
        self._e = e
        self._y = y
        self._sp = sp
        return u

    def _limit(self, u: float, dt: float) -> float:
        lo, hi = self._lo, self._hi
        u = lo if u < lo else (hi if u > hi else u)
        step = self._rate * dt
        prev = self._u
        if u > prev + step:
            return prev + step
        if u < prev - step:
            return prev - step
        return u

    # -- telemetry and persistence ---------------------------------------------------------
    @property
    def output(self) -> float:
        """The last output."""
        return self._u

    def state(self) -> dict[str, float]:
        """Telemetry: error, P/I/D terms, raw and applied output, saturation flag."""
        s = self._dir
        return {
            "error": self._e,
            "measurement": self._y,
            "setpoint": self._sp,
            "reference": self._sp if self._ref_tau == 0.0 else self._ref,
            "p": s * self._kp * self._e,
            "i": self._integral,
            "d": -s * self._kd * self._d_filt,
            "d_measurement": self._d_filt,
            "feedforward": self._feedforward(0.0 if math.isnan(self._sp) else self._sp),
            "output_raw": self._u_raw,
            "output": self._u,
            "saturated": float(self._u != self._u_raw),
            "held_steps": float(self._held),
        }

    def to_config(self) -> dict[str, Any]:
        """Parameters for ``controllers.save`` (``type`` is added by the caller)."""
        return self.config.to_dict()

    def __repr__(self) -> str:
        c = self.config
        return f"PIDController(kp={c.kp}, ki={c.ki}, kd={c.kd}, limits=[{c.output_min}, {c.output_max}])"


@CONTROLLERS.register("pid")
def make_pid(**params: Any) -> PIDController:
    """PID with anti-windup, filtered derivative on measurement, output/rate limits."""
    if "config" in params and isinstance(params["config"], dict):
        params = {**params.pop("config"), **params}
    return PIDController(PIDConfig.from_dict(params))
