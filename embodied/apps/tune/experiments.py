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

from controllers.analysis import step_response
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
        stop_on_success: bool = True,
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

    The setpoint is ``start`` for ``config.step_hold_s`` seconds, then ``end``. The figures
    come from :func:`controllers.analysis.step_response` on the measured concept after the step
    (band ``config.settle_band`` of the step size), plus the normalised integral of absolute
    error (``iae_norm``: mean |error| / |step| after the step) used as the auto-tune score.

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
    hold = cfg.step_hold_s
    ep = session.run_episode(
        setpoint=lambda t_s: start if t_s < hold else end, pace=False, label="step test"
    )
    if ep.meta.get("reason") == "stopped":
        raise ConfigError("step test stopped before the episode ended")
    dt = session.task.env.dt
    t = np.arange(len(ep)) * dt
    y, sp = ep.measurements, ep.setpoints
    after = np.flatnonzero(sp == end)
    if after.size < 3:
        raise ConfigError(
            f"the episode ended after {len(ep)} steps ({t[-1] if len(t) else 0:.2f} s), before "
            f"the step at {hold} s had 3 samples",
            fix="shorten the hold time (step_hold_s) or use a slower setpoint",
        )
    t_step = float(t[after[0]])
    fig = step_response(t, y, end, step_time=t_step, band=cfg.settle_band)
    err = np.abs(y[after] - end)
    err = err[np.isfinite(err)]
    iae_norm = float(err.mean() / abs(end - start)) if err.size else math.inf
    score = iae_norm + (0.0 if ep.success else FAIL_PENALTY)
    stride = max(1, len(ep) // TRACE_POINTS)
    result: dict[str, Any] = {
        **fig.to_dict(),
        "iae_norm": iae_norm,
        "success": bool(ep.success),
        "score": score,
        "steps": len(ep),
        "step_time_s": t_step,
        "from": start,
        "to": end,
        "mode": session.live.mode,
        "params": dict(session.live.params.get(session.live.mode, {})),
        "seed": session.seed,
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
    """Propose PID gains by coordinate search over ``kp`` and ``ki`` (log scale).

    Each candidate is scored by a step test (:func:`step_test`: normalised IAE after the
    step, plus :data:`FAIL_PENALTY` when the task fails; lower is better). From the current
    gains it tries multiplying one gain by the search factor (x2 first, then /2), keeps what
    improves, and halves the factor (in log space) after a sweep without improvement, until
    ``budget`` step tests ran. The proposal is not applied; the page offers "Apply proposal".

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
        }
        candidates.append(row)
        session.emit(
            "autotune_candidate",
            message=f"auto-tune {len(candidates)}/{budget}: kp={params['kp']:.4g} "
            f"ki={params['ki']:.4g} score={res['score']:.4f}",
            candidate=row,
        )
        seen[key] = float(res["score"])
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
    result = {
        "proposal": best,
        "score": best_score,
        "baseline_score": baseline,
        "candidates": candidates,
        "from": start,
        "to": end,
    }
    session.proposal = best
    write_json(session.config.out_dir / "last_autotune.json", result)
    session.emit(
        "autotune_done",
        message=f"auto-tune proposes kp={best['kp']:.4g} ki={best['ki']:.4g}: score "
        f"{best_score:.4f} (current gains {baseline:.4f}) after {len(candidates)} step tests",
        result=result,
    )
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
