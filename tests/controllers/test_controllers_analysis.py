"""Step-response figures on analytic curves."""

from __future__ import annotations

import math

import numpy as np
import pytest

from controllers.analysis import step_response, tracking_rmse
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
    with pytest.raises(ConfigError, match="increasing"):
        step_response([0, 2, 1], [0, 1, 1], 1.0)


def test_tracking_rmse() -> None:
    assert tracking_rmse([1, 2, 3], [1, 2, 5]) == pytest.approx(math.sqrt(4 / 3))
    assert tracking_rmse([9, 2, float("nan")], [1, 2, 3], skip=1) == 0.0
