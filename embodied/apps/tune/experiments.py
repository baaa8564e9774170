"""Experiments the tuning page runs on the live session: a setpoint step and auto-tuning.

Both run through :meth:`TuneSession.run_episode` (i.e. :func:`embodied.loop.rollout` with the
live controller), so the page watches them like any episode and ``embodied tune --step-test``
measures exactly what the page's button measures. They take the session through the public
surface :class:`ExperimentSession` (the session imports this module, not the other way round).
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np

from controllers.analysis import (
    FOPDT,
    SettledStep,
    fit_fopdt,
    pi_fopdt_margins,
    simc_pi,
    step_response,
)
from embodied.apps.tune.configuration_tune import TuneConfig
from embodied.apps.tune.live_controller import LiveController
from embodied.apps.tune.task import TuneTask
from embodied.errors import ConfigError, EmbodiedError
from embodied.io import write_json
from embodied.loop import Episode, Setpoint

FAIL_PENALTY = 1.0
"""Auto-tune score added when the task fails (score units: normalised IAE)."""
TRACE_POINTS = 400


class ExperimentSession(Protocol):
    """What the experiments use of a :class:`~embodied.apps.tune.session.TuneSession`.

    Attributes:
        config: Step hold time, settle band and output folder.
        task: The tuned task (its env's time step).
        live: The live controller whose gains are measured and searched.
        seed: The episode seed (reported with the result).
        proposal: The latest auto-tune proposal (``{kp, ki}``); the page offers to apply it.
        last_step_result: The latest step-test result.
    """

    config: TuneConfig
    task: TuneTask
    live: LiveController
    seed: int
    proposal: dict[str, Any] | None
    last_step_result: dict[str, Any] | None

    @property
    def cancel_requested(self) -> bool:
        """The person pressed Stop: give up before the next step test."""
        ...

    def run_episode(
        self,
        *,
        setpoint: Setpoint | None = None,
        pace: bool | None = None,
        label: str = "episode",
        stop_on_success: bool | None = None,
        seed: int | None = None,
    ) -> Episode:
        """Run one episode with the live controller, streaming telemetry."""
        ...

    def emit(self, kind: str, **payload: Any) -> None:
        """Queue an event for the page."""
        ...


def step_test(
    session: ExperimentSession, start: float, end: float, *, emit: bool = True
) -> dict[str, Any]:
    """Run one episode whose setpoint steps from ``start`` to ``end`` and analyse it.

    The setpoint is ``start`` until the measurement has stayed within ``config.settle_band``
    of the step size around ``start`` for ``config.step_dwell_s`` seconds (and at least
    ``config.step_hold_s`` have passed), then ``end``
    (:class:`controllers.analysis.SettledStep`; at ``config.step_timeout_s`` it steps anyway
    and says ``start_settled: false``). The figures come from
    :func:`controllers.analysis.step_response` on the measured concept after the step (10-90 %
    rise, overshoot, settling in the same band, steady-state error, IAE, ITAE), plus the
    normalised IAE (``iae_norm``: mean |error| / |step| after the step). ``acceptable`` says
    whether the loop settled, kept ``config.max_overshoot_pct`` and the task succeeded: the
    auto-tuner never prefers a candidate that is not.

    Args:
        session: The tuning session (its live controller and env).
        start: Setpoint before the step (concept units).
        end: Setpoint after the step.
        emit: Send the result to the page as a ``step_result`` event.

    Returns:
        ``{"rise_time_s", "overshoot_pct", "settling_time_s", ..., "iae_norm", "success",
        "score", "mode", "params", "from", "to", "trace"}``; also written to
        ``<out_dir>/last_step_test.json`` and emitted to the page as ``step_result``.

    Raises:
        ConfigError: the episode was stopped, or ended before the step.
    """
    cfg = session.config
    band = cfg.settle_band * abs(end - start)
    if band <= 0:
        raise ConfigError(f"step test from {start} to {end}: zero step", fix="pick two setpoints")
    schedule = SettledStep(
        start, end, band, cfg.step_dwell_s, cfg.step_timeout_s, min_hold_s=cfg.step_hold_s
    )
    # the configured seed: every candidate of an auto-tune meets the same scene
    ep = session.run_episode(setpoint=schedule, pace=False, label="step test", seed=cfg.seed)
    if ep.meta.get("reason") == "stopped":
        raise ConfigError("step test stopped before the episode ended")
    dt = session.task.env.dt
    t = np.arange(len(ep)) * dt
    y, sp = ep.measurements, ep.setpoints
    after = np.flatnonzero(sp == end)
    if after.size < 3:
        raise ConfigError(
            f"the episode ended after {len(ep)} steps ({t[-1] if len(t) else 0:.2f} s), before "
            f"the step (at least {cfg.step_hold_s} s, after {cfg.step_dwell_s} s settled) had 3 "
            "samples",
            fix="shorten step_hold_s / step_dwell_s or use a slower setpoint",
        )
    t_step = float(t[after[0]])
    fig = step_response(t, y, end, step_time=t_step, band=cfg.settle_band)
    err = np.abs(y[after] - end)
    err = err[np.isfinite(err)]
    iae_norm = float(err.mean() / abs(end - start)) if err.size else math.inf
    score = iae_norm + (0.0 if ep.success or cfg.hold else FAIL_PENALTY)
    settled = math.isfinite(fig.settling_time_s)
    # in the hold mode the task runs on and does not succeed: only the loop is judged
    task_ok = cfg.hold or bool(ep.success)
    acceptable = settled and fig.overshoot_pct <= cfg.max_overshoot_pct and task_ok
    stride = max(1, len(ep) // TRACE_POINTS)
    result: dict[str, Any] = {
        **fig.to_dict(),
        "iae_norm": iae_norm,
        "start_settled": schedule.settled,
        "settle_band_pct": 100.0 * cfg.settle_band,
        "dwell_s": cfg.step_dwell_s,
        "settled": settled,
        "acceptable": acceptable,
        "max_overshoot_pct": cfg.max_overshoot_pct,
        "success": bool(ep.success),
        "score": score,
        "steps": len(ep),
        "step_time_s": t_step,
        "from": start,
        "to": end,
        "mode": session.live.mode,
        "params": dict(session.live.params.get(session.live.mode, {})),
        "seed": cfg.seed,
        "hold": cfg.hold,
        "trace": {
            "t": [round(float(v), 4) for v in t[::stride]],
            "y": [_num(v) for v in y[::stride]],
            "setpoint": [_num(v) for v in sp[::stride]],
        },
    }
    session.last_step_result = result
    write_json(cfg.out_dir / "last_step_test.json", result)
    if emit:
        session.emit("step_result", message=_summary(result), result=result)
    return result


def autotune(session: ExperimentSession, start: float, end: float, budget: int) -> dict[str, Any]:
    """Propose PID gains with ``config.autotune_method``: :func:`search_autotune` (``search``)
    or :func:`simc_autotune` (``simc``)."""
    if session.config.autotune_method == "simc":
        return simc_autotune(session, start, end, budget)
    return search_autotune(session, start, end, budget)


BUMP_FRACTION = 0.25
"""SIMC bump test: the knob steps by this fraction of its range."""


def simc_autotune(
    session: ExperimentSession, start: float, end: float, budget: int = 4
) -> dict[str, Any]:
    """Propose PI gains from a model: bump test, FOPDT fit, SIMC rule, margins, step tests.

    1. Bump test, open loop: the knob holds its neutral value, then steps by
       :data:`BUMP_FRACTION` of its range once the measurement has settled; it runs through
       the PID's feed-forward path with every feedback gain at zero (``kp = ki = kd = 0``,
       ``kff = 1``: the output is the schedule).
    2. :func:`controllers.analysis.fit_fopdt` on the measured response (two-point method);
       half a control period is added to the dead time for the zero-order hold of the
       sampled loop (Skogestad 2003).
    3. :func:`controllers.analysis.simc_pi` with closed-loop time constant ``tau_c = theta``
       (SIMC's tight tuning), then ``2, 4, 8 theta`` (smoother): for each, the loop's gain and
       phase margins on the fitted model (:func:`controllers.analysis.pi_fopdt_margins`) and a
       step test with those gains; the first (fastest) acceptable loop is the proposal. The
       model misses what the plant does beyond it (here: its speed gain grows with the knob,
       ``gain ** alpha``), so the step test, not the model, has the last word.
    4. With no acceptable loop within ``budget - 1`` step tests, ``proposal`` is None.

    Returns:
        ``{"proposal", "model", "fitted", "candidates" (with margins), "method": "simc",
        ...}``; also written to ``<out_dir>/last_autotune.json``, emitted as ``autotune_done``.
    """
    cfg, live = session.config, session.live
    saved_mode = live.mode
    # the bump test sets kff and the candidates direction: name their defaults so that
    # restoring (and every candidate) starts from the same full parameter set
    saved = {"kff": 0.0, "direction": 1, **live.params.get("pid", {})}
    lo, hi = float(saved.get("output_min", -1.0)), float(saved.get("output_max", 1.0))
    u0 = float(saved.get("bias", 0.0))
    du = BUMP_FRACTION * (hi - lo) * (1.0 if u0 + BUMP_FRACTION * (hi - lo) <= hi else -1.0)
    dt = session.task.env.dt
    candidates: list[dict[str, Any]] = []
    best: dict[str, Any] | None = None
    try:
        live.set_mode("pid", {**saved, "kp": 0.0, "ki": 0.0, "kd": 0.0, "kff": 1.0, "bias": 0.0})
        bump = _BumpSchedule(u0, u0 + du, cfg)
        ep = session.run_episode(setpoint=bump, pace=False, label="bump test", seed=cfg.seed)
        if ep.meta.get("reason") == "stopped":
            raise ConfigError("bump test stopped before the episode ended")
        if bump.schedule.step_time_s is None:
            raise ConfigError("the bump test ended before the knob stepped", fix="use hold mode")
        t = np.arange(len(ep)) * dt
        # the knob changes at the control step after the schedule decided to step
        fitted = fit_fopdt(t, ep.measurements, bump.schedule.step_time_s + dt, du)
        model = FOPDT(fitted.gain, fitted.tau_s, fitted.theta_s + dt / 2)
        for factor in (1.0, 2.0, 4.0, 8.0)[: max(1, budget - 1)]:
            if session.cancel_requested:
                raise EmbodiedError(f"auto-tune stopped after {len(candidates)} step tests")
            gains = simc_pi(model, tau_c_s=factor * model.theta_s)
            margins = pi_fopdt_margins(gains["kp"], gains["ki"], model)
            proposal = {"kp": gains["kp"], "ki": gains["ki"]}
            live.set_mode("pid", {**saved, **proposal, "direction": int(gains["direction"])})
            check = step_test(session, start, end, emit=False)
            row = {**proposal, "tau_c_s": gains["tau_c_s"], "margins": margins,
                   **{k: check[k] for k in ("score", "rise_time_s", "overshoot_pct",
                      "settling_time_s", "success", "acceptable", "start_settled")}}  # fmt: skip
            candidates.append(row)
            session.emit(
                "autotune_candidate",
                message=f"SIMC tau_c={gains['tau_c_s']:.3g} s: kp={proposal['kp']:.4g} "
                f"ki={proposal['ki']:.4g}, overshoot {_fmt(check['overshoot_pct'], ' %')}, "
                f"settling {_fmt(check['settling_time_s'], ' s')}",
                candidate=row,
            )
            if check["acceptable"]:
                best = row
                break
    finally:
        live.set_mode("pid", saved)
        live.set_mode(saved_mode)
    chosen = None if best is None else {"kp": best["kp"], "ki": best["ki"]}
    result = {
        "method": "simc",
        "proposal": chosen,
        "score": None if best is None else best["score"],
        "baseline_score": None,
        "candidates": candidates,
        "model": {"gain": model.gain, "tau_s": model.tau_s, "theta_s": model.theta_s},
        "fitted": {"gain": fitted.gain, "tau_s": fitted.tau_s, "theta_s": fitted.theta_s},
        "bump": {"from": u0, "to": u0 + du, "start_settled": bump.schedule.settled},
        "margins": None if best is None else best["margins"],
        "from": start,
        "to": end,
        "max_overshoot_pct": cfg.max_overshoot_pct,
    }
    session.proposal = proposal
    write_json(cfg.out_dir / "last_autotune.json", result)
    head = f"SIMC: model K={model.gain:.3g} tau={model.tau_s:.3g} s theta={model.theta_s:.3g} s; "
    if best is None:
        message = head + f"no acceptable loop in {len(candidates)} step tests: no proposal"
    else:
        m = best["margins"]
        message = head + (
            f"kp={best['kp']:.4g} ki={best['ki']:.4g} (tau_c {best['tau_c_s']:.3g} s), gain "
            f"margin {m['gain_margin']:.3g}, phase margin {m['phase_margin_deg']:.3g} deg"
        )
    session.emit("autotune_done", message=message, result=result)
    return result


class _BumpSchedule:
    """The bump test's schedule: neutral knob until the measurement settles, then the bump."""

    def __init__(self, u0: float, u1: float, cfg: TuneConfig) -> None:
        self.schedule = SettledStep(
            u0, u1, band=1.0, dwell_s=0.0, timeout_s=cfg.step_timeout_s,
            min_hold_s=cfg.step_hold_s,
        )  # fmt: skip
        self._last: list[float] = []
        self._band = cfg.settle_band
        self._dwell = cfg.step_dwell_s
        self._since: float | None = None

    def __call__(self, t_s: float) -> float:
        return self.schedule(t_s)

    def observe(self, t_s: float, y: float) -> None:
        """Settled = the measurement moved less than ``settle_band`` of its value over the
        dwell (open loop there is no setpoint to settle at)."""
        if self.schedule.step_time_s is not None or not math.isfinite(y):
            return
        self._last.append(y)
        ref = self._last[0]
        if abs(y - ref) > self._band * max(abs(ref), 1e-9):
            self._last, self._since = [y], t_s
            return
        if self._since is None:
            self._since = t_s
        if t_s - self._since >= self._dwell and t_s >= self.schedule.min_hold_s:
            self.schedule.settled = True
            self.schedule.step_time_s = float(t_s)


def search_autotune(
    session: ExperimentSession, start: float, end: float, budget: int
) -> dict[str, Any]:
    """Propose PID gains by coordinate search over ``kp`` and ``ki`` (log scale).

    Each candidate is scored by a step test (:func:`step_test`: normalised IAE after the
    step, plus :data:`FAIL_PENALTY` when the task fails; lower is better), but only a candidate
    whose loop settled within the overshoot limit with the task succeeding (``acceptable``)
    can be preferred: an unsettled or over-limit loop is never proposed, whatever its IAE.
    From the current gains it tries multiplying one gain by the search factor (x4 first, then
    /4), keeps what improves, and takes the square root of the factor after a sweep without
    improvement, until ``budget`` step tests ran. When no candidate is acceptable the result has
    ``proposal: None``. The proposal is not applied; the page offers "Apply proposal".

    Args:
        session: The tuning session; its PID gains and mode are restored afterwards.
        start: Setpoint before each step test's step.
        end: Setpoint after the step.
        budget: Number of step tests (candidates) to run at most.

    Returns:
        ``{"proposal": {kp, ki}, "score", "baseline_score", "candidates": [...]}``; also
        written to ``<out_dir>/last_autotune.json`` and emitted as ``autotune_done``.

    Raises:
        EmbodiedError: the person pressed Stop (:attr:`ExperimentSession.cancel_requested`),
            or a step test failed (``ConfigError``).
    """
    live = session.live
    saved_mode = live.mode
    saved = dict(live.params.get("pid", {}))
    candidates: list[dict[str, Any]] = []
    seen: dict[tuple[float, float], float] = {}

    def evaluate(params: dict[str, float]) -> float:
        """The candidate's score for comparison: inf unless its loop is acceptable."""
        key = (round(params["kp"], 9), round(params["ki"], 9))
        if key in seen:  # already measured (deterministic seed): no episode spent
            return seen[key]
        live.set_mode("pid", {**saved, **params})
        res = step_test(session, start, end, emit=False)
        row = {
            "kp": params["kp"],
            "ki": params["ki"],
            "score": res["score"],
            "rise_time_s": res["rise_time_s"],
            "overshoot_pct": res["overshoot_pct"],
            "settling_time_s": res["settling_time_s"],
            "success": res["success"],
            "acceptable": res["acceptable"],
            "start_settled": res["start_settled"],
        }
        candidates.append(row)
        session.emit(
            "autotune_candidate",
            message=f"auto-tune {len(candidates)}/{budget}: kp={params['kp']:.4g} "
            f"ki={params['ki']:.4g} score={res['score']:.4f}"
            + ("" if res["acceptable"] else " (not acceptable: unsettled, over-limit or failed)"),
            candidate=row,
        )
        seen[key] = float(res["score"]) if res["acceptable"] else math.inf
        return seen[key]

    best = {"kp": float(saved.get("kp", 1.0)), "ki": float(saved.get("ki", 0.0))}
    try:
        best_score = baseline = evaluate(best)
        factor = 4.0
        while len(candidates) < budget and not session.cancel_requested and factor > 1.05:
            improved = False
            for name in ("kp", "ki"):
                for mult in (factor, 1.0 / factor):
                    if len(candidates) >= budget or session.cancel_requested:
                        break
                    cand = dict(best)
                    base = cand[name] if cand[name] > 0 else max(cand["kp"], 1e-3)
                    cand[name] = base * mult if cand[name] > 0 else base
                    score = evaluate(cand)
                    if score < best_score:
                        best, best_score, improved = cand, score, True
                        break
            if not improved:
                factor = math.sqrt(factor)
        if session.cancel_requested:  # Stop landed between two step tests: no proposal
            raise EmbodiedError(f"auto-tune stopped after {len(candidates)} step tests")
    finally:
        live.set_mode("pid", saved)
        live.set_mode(saved_mode)
    found = math.isfinite(best_score)
    result = {
        "proposal": best if found else None,
        "score": best_score if found else None,
        "baseline_score": baseline if math.isfinite(baseline) else None,
        "candidates": candidates,
        "from": start,
        "to": end,
        "method": "search",
        "max_overshoot_pct": session.config.max_overshoot_pct,
    }
    session.proposal = best if found else None
    write_json(session.config.out_dir / "last_autotune.json", result)
    if found:
        message = (
            f"auto-tune proposes kp={best['kp']:.4g} ki={best['ki']:.4g}: score {best_score:.4f} "
            f"(current gains {_fmt(result['baseline_score'])}) after {len(candidates)} step tests"
        )
    else:
        message = (
            f"auto-tune found no gains that settle within {session.config.max_overshoot_pct:g} % "
            f"overshoot in {len(candidates)} step tests; the current gains are kept"
        )
    session.emit("autotune_done", message=message, result=result)
    return result


def _num(v: float) -> float | None:
    return round(float(v), 5) if math.isfinite(v) else None


def _fmt(v: Any, unit: str = "") -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3g}{unit}"


def _summary(r: dict[str, Any]) -> str:
    return (
        f"step {r['from']:g} -> {r['to']:g}: rise {_fmt(r['rise_time_s'], ' s')}, overshoot "
        f"{_fmt(r['overshoot_pct'], ' %')}, settling {_fmt(r['settling_time_s'], ' s')}, "
        f"IAE/step {_fmt(r['iae_norm'])}, success={r['success']}"
    )
