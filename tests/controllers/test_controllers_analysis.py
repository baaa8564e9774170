"""Step-response figures on analytic curves."""

from __future__ import annotations

import math

import numpy as np
import pytest

from controllers.analysis import steady_state_rmse, step_response, tracking_rmse
from embodied.errors import ConfigError


def test_first_order_response() -> None:
    tau = 0.3
    t = np.linspace(0, 5, 5001)
    y = 2.0 * (1 - np.exp(-t / tau))
    r = step_response(t, y, setpoint=2.0)
    assert r.rise_time_s == pytest.approx(tau * math.log(9), rel=1e-3)
    assert r.settling_time_s == pytest.approx(tau * math.log(50), rel=1e-3)
    assert r.overshoot_pct == pytest.approx(0.0, abs=1e-9)
    assert r.steady_state_error == pytest.approx(0.0, abs=1e-6)


def test_second_order_underdamped_overshoot_and_peak_time() -> None:
    zeta, wn = 0.3, 4.0
    wd = wn * math.sqrt(1 - zeta**2)
    phi = math.acos(zeta)
    t = np.linspace(0, 10, 20001)
    y = 1 - np.exp(-zeta * wn * t) / math.sqrt(1 - zeta**2) * np.sin(wd * t + phi)
    r = step_response(t, y, setpoint=1.0)
    expected_os = 100 * math.exp(-zeta * math.pi / math.sqrt(1 - zeta**2))
    assert r.overshoot_pct == pytest.approx(expected_os, rel=1e-3)
    assert r.peak_time_s == pytest.approx(math.pi / wd, abs=1e-3)
    # settling time: last exit from the 2 % band, bounded by the envelope estimate
    envelope_ts = -math.log(0.02 * math.sqrt(1 - zeta**2)) / (zeta * wn)
    assert r.settling_time_s <= envelope_ts
    assert np.all(np.abs(y[t > r.settling_time_s + 1e-3] - 1) <= 0.02)
    assert np.any(np.abs(y[t < r.settling_time_s - 1e-2] - 1) > 0.02)


def test_downward_step_delay_and_final_reference() -> None:
    tau, t_step = 0.2, 1.0
    t = np.linspace(0, 4, 4001)
    y = np.where(t < t_step, 1.0, 0.4 + 0.6 * np.exp(-(t - t_step) / tau))
    r = step_response(t, y, setpoint=0.0, step_time=t_step, relative_to="final")
    assert r.final_value == pytest.approx(0.4, abs=1e-4)
    assert r.rise_time_s == pytest.approx(tau * math.log(9), rel=1e-2)
    assert r.steady_state_error == pytest.approx(-0.4, abs=1e-4)
    # relative to the setpoint (0) the signal never reaches 90 % of the step
    r_sp = step_response(t, y, setpoint=0.0, step_time=t_step)
    assert math.isnan(r_sp.rise_time_s) and math.isnan(r_sp.settling_time_s)
    assert r_sp.to_dict()["rise_time_s"] is None


def test_bad_inputs() -> None:
    with pytest.raises(ConfigError, match="equal length"):
        step_response([0, 1, 2], [0, 1], 1.0)
    with pytest.raises(ConfigError, match="zero step"):
        step_response([0, 1, 2], [1, 1, 1], 1.0)
    with pytest.raises(ConfigError, match="zero step"):  # equal up to rounding
        step_response([0, 1, 2], [0.14999999999999997, 0.15, 0.15], 0.15)
    with pytest.raises(ConfigError, match="increasing"):
        step_response([0, 2, 1], [0, 1, 1], 1.0)
    # a start inside min_step of the setpoint (its settling band) is no step either; just
    # outside it is analysed, with the overshoot relative to that small step
    with pytest.raises(ConfigError, match="min_step"):
        step_response([0, 1, 2], [0.148, 0.16, 0.15], 0.15, min_step=0.003)
    small = step_response([0, 1, 2], [0.146, 0.16, 0.15], 0.15, min_step=0.003)
    assert small.overshoot_pct == pytest.approx(250.0)
    with pytest.raises(ConfigError, match="min_step"):
        step_response([0, 1, 2], [0, 1, 1], 1.0, min_step=-1.0)


def test_tracking_rmse() -> None:
    assert tracking_rmse([1, 2, 3], [1, 2, 5]) == pytest.approx(math.sqrt(4 / 3))
    assert tracking_rmse([9, 2, float("nan")], [1, 2, 3], skip=1) == 0.0


def test_steady_state_rmse_leaves_out_the_start_and_each_setpoint_change() -> None:
    # 10 Hz, 0.3 s transient: 3 samples after the start and after the change at index 6.
    setpoints = [1.0] * 6 + [2.0] * 6
    measured = [0.0, 0.5, 0.9, 1.1, 0.9, 1.0, 1.0, 1.5, 1.8, 2.2, 1.8, 2.0]
    kept = [(1.1, 1.0), (0.9, 1.0), (1.0, 1.0), (2.2, 2.0), (1.8, 2.0), (2.0, 2.0)]
    want = math.sqrt(sum((m - s) ** 2 for m, s in kept) / len(kept))
    assert steady_state_rmse(measured, setpoints, rate_hz=10, transient_s=0.3) == pytest.approx(
        want
    )
    # no transient: the whole-record figure; all left out: NaN
    whole = steady_state_rmse(measured, setpoints, rate_hz=10, transient_s=0.0)
    assert whole == pytest.approx(tracking_rmse(measured, setpoints))
    assert math.isnan(steady_state_rmse(measured, setpoints, rate_hz=10, transient_s=1.0))
    assert steady_state_rmse(measured, setpoints, 10, 0.3) < tracking_rmse(measured, setpoints)
    with pytest.raises(ConfigError, match="rate_hz"):
        steady_state_rmse(measured, setpoints, rate_hz=0, transient_s=0.3)


# ---------------------------------------------------------------------------------------------
# issue #38: IAE/ITAE, a settled start, FOPDT fit, SIMC and the loop margins
# ---------------------------------------------------------------------------------------------


def test_iae_itae_match_closed_forms() -> None:
    """First order 1 - e^(-t/tau): IAE = tau, ITAE = tau^2. Critically damped second order
    1 - (1 + w t) e^(-w t): IAE = 2 / w, ITAE = 3 / w^2; 10-90 % rise from the exact inverse."""
    tau = 0.4
    t = np.linspace(0, 12, 120001)
    r = step_response(t, 1 - np.exp(-t / tau), setpoint=1.0)
    assert r.iae == pytest.approx(tau, rel=1e-4) and r.itae == pytest.approx(tau**2, rel=1e-3)
    w = 5.0
    y = 1 - (1 + w * t) * np.exp(-w * t)
    r2 = step_response(t, y, setpoint=1.0)
    assert r2.iae == pytest.approx(2 / w, rel=1e-4) and r2.itae == pytest.approx(3 / w**2, rel=1e-3)

    def crossing(level: float) -> float:  # solve (1 + x) e^-x = 1 - level by bisection
        lo, hi = 0.0, 20.0
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if (1 + mid) * math.exp(-mid) > 1 - level else (lo, mid)
        return lo / w

    assert r2.rise_time_s == pytest.approx(crossing(0.9) - crossing(0.1), rel=1e-4)
    assert r2.overshoot_pct == pytest.approx(0.0, abs=1e-9)
    assert r2.settling_time_s == pytest.approx(crossing(0.98), rel=1e-3)


def test_settled_step_waits_for_the_band_and_dwell() -> None:
    from controllers.analysis import SettledStep

    sched = SettledStep(start=0.08, end=0.12, band=0.002, dwell_s=0.5, timeout_s=5.0)
    dt, t, y = 0.05, 0.0, 0.0
    while sched.step_time_s is None:
        assert sched(t) == 0.08
        y += (0.08 - y) * 0.1  # first-order approach to the start value
        sched.observe(t, y)
        t += dt
    assert sched.settled and sched(t) == 0.12
    # it entered the band at (1 - 0.1)^k * 0.08 <= 0.002 and stayed 0.5 s in it
    k_in = math.ceil(math.log(0.002 / 0.08) / math.log(0.9)) - 1
    assert sched.step_time_s == pytest.approx(k_in * dt + 0.5, abs=dt + 1e-9)
    never = SettledStep(start=0.0, end=1.0, band=0.01, dwell_s=0.2, timeout_s=1.0)
    for k in range(30):  # a signal that never settles: the step comes at the timeout
        never.observe(k * 0.05, 0.5)
        never(k * 0.05)
    assert not never.settled and never.step_time_s == pytest.approx(1.0)
    with pytest.raises(ConfigError, match="settled step"):
        SettledStep(0.0, 1.0, band=0.0, dwell_s=0.1, timeout_s=1.0)


def test_fopdt_fit_recovers_the_model_and_simc_follows_skogestad() -> None:
    from controllers.analysis import FOPDT, fit_fopdt, simc_pi

    k, tau, theta, du, t_step = 0.05, 0.3, 0.1, 2.0, 0.5
    t = np.arange(0, 5, 0.001)
    y = 0.1 + np.where(t < t_step + theta, 0.0, k * du * (1 - np.exp(-(t - t_step - theta) / tau)))
    m = fit_fopdt(t, y, t_step, du)
    assert m.gain == pytest.approx(k, rel=1e-3)
    assert m.tau_s == pytest.approx(tau, rel=1e-2) and m.theta_s == pytest.approx(theta, abs=2e-3)
    g = simc_pi(
        FOPDT(k, tau, theta)
    )  # tau_c = theta: kc = tau / (K 2 theta), tau_I = min(tau, 8 theta)
    assert g["kp"] == pytest.approx(tau / (k * 2 * theta)) and g["ki"] == pytest.approx(
        g["kp"] / tau
    )
    slow = simc_pi(FOPDT(-k, 2.0, 0.1), tau_c_s=0.1)  # tau_I = 4 (tau_c + theta) < tau
    assert slow["ki"] == pytest.approx(slow["kp"] / 0.8) and slow["direction"] == -1.0
    with pytest.raises(ConfigError, match="did not move"):
        fit_fopdt(t, np.full_like(t, 0.1), t_step, du)


def test_margins_of_an_integrator_with_dead_time_match_the_closed_form() -> None:
    """L(s) = k e^(-theta s) / s: crossover at w = k, phase margin 90 deg - theta k (deg),
    phase crossover at pi / (2 theta), gain margin pi / (2 theta k)."""
    from controllers.analysis import FOPDT, loop_margins, pi_fopdt_margins

    k, theta = 2.0, 0.2
    m = loop_margins(lambda w: k * np.exp(-1j * w * theta) / (1j * w))
    assert m["gain_crossover_rad_s"] == pytest.approx(k, rel=1e-3)
    assert m["phase_margin_deg"] == pytest.approx(90 - math.degrees(theta * k), abs=0.05)
    assert m["phase_crossover_rad_s"] == pytest.approx(math.pi / (2 * theta), rel=1e-3)
    assert m["gain_margin"] == pytest.approx(math.pi / (2 * theta * k), rel=1e-3)
    # SIMC's tight tuning of an FOPDT: gain margin ~3 and phase margin ~47-60 deg (Skogestad 2003)
    from controllers.analysis import simc_pi

    model = FOPDT(1.0, 1.0, 0.1)
    g = simc_pi(model)
    pm = pi_fopdt_margins(g["kp"], g["ki"], model)
    assert 2.8 <= pm["gain_margin"] <= 3.3 and 45 <= pm["phase_margin_deg"] <= 65
