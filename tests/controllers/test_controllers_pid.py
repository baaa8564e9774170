"""PID against analytic step responses of a first-order plant ``tau dy/dt = -y + K u``."""

from __future__ import annotations

import math

import numpy as np
import pytest

import controllers
from controllers.analysis import step_response
from controllers.pid import PIDConfig, PIDController
from embodied.contracts import Controller
from embodied.errors import ConfigError

TAU = 0.5  # s, plant time constant
GAIN = 2.0  # plant DC gain


def simulate(
    pid: PIDController,
    setpoint: float | np.ndarray,
    t_end: float,
    dt: float,
    tau: float = TAU,
    gain: float = GAIN,
    y0: float = 0.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Closed loop with the plant discretised exactly under zero-order hold."""
    n = round(t_end / dt)
    a = math.exp(-dt / tau)
    y = y0
    ts, ys, us = [], [], []
    for k in range(n):
        sp = float(setpoint[k]) if isinstance(setpoint, np.ndarray) else setpoint
        u = pid.update(y, sp, dt)
        ts.append(k * dt)
        ys.append(y)
        us.append(u)
        y = a * y + (1.0 - a) * gain * u
    return np.asarray(ts), np.asarray(ys), np.asarray(us)


def test_implements_controller_contract_and_registry() -> None:
    pid = controllers.make("pid", kp=1.0, ki=0.5)
    assert isinstance(pid, Controller)
    assert isinstance(pid, PIDController)
    assert isinstance(controllers.make("fixed", value=0.3), Controller)


def test_p_only_steady_state_error_and_time_constant_match_analytic() -> None:
    kp = 3.0
    pid = PIDController(kp=kp)
    t, y, _ = simulate(pid, 1.0, t_end=3.0, dt=1e-3)
    loop_gain = GAIN * kp
    y_ss = loop_gain / (1 + loop_gain)  # analytic steady state for r = 1
    tau_cl = TAU / (1 + loop_gain)  # analytic closed-loop time constant
    assert y[-1] == pytest.approx(y_ss, rel=1e-3)
    assert 1.0 - y[-1] == pytest.approx(1 / (1 + loop_gain), rel=1e-2)  # steady-state error
    resp = step_response(t, y, 1.0, relative_to="final")
    assert resp.rise_time_s == pytest.approx(tau_cl * math.log(9), rel=0.02)
    assert resp.overshoot_pct == pytest.approx(0.0, abs=1e-6)
    # 63.2 % point = one time constant
    t63 = np.interp(0.632 * y_ss, y, t)
    assert t63 == pytest.approx(tau_cl, rel=0.02)


def test_pi_eliminates_steady_state_error() -> None:
    pid = PIDController(kp=1.0, ki=4.0)
    _, y, _ = simulate(pid, 1.0, t_end=6.0, dt=1e-3)
    p_only = PIDController(kp=1.0)
    _, y_p, _ = simulate(p_only, 1.0, t_end=6.0, dt=1e-3)
    assert abs(1.0 - y[-1]) < 1e-3
    assert abs(1.0 - y_p[-1]) > 0.3  # 1 / (1 + 2) for P-only


def test_pi_pole_zero_cancellation_gives_first_order_response() -> None:
    # ki/kp = 1/tau cancels the plant pole: closed loop is first order, tau_cl = tau/(K kp)
    kp = 2.0
    pid = PIDController(kp=kp, ki=kp / TAU)
    t, y, _ = simulate(pid, 1.0, t_end=2.0, dt=1e-3)
    tau_cl = TAU / (GAIN * kp)
    expected = 1.0 - np.exp(-t / tau_cl)
    assert np.max(np.abs(y - expected)) < 5e-3


@pytest.mark.parametrize("mode", ["clamping", "back_calculation"])
def test_anti_windup_bounds_integrator_during_saturation(mode: str) -> None:
    """Unreachable setpoint for 3 s, then a reachable one."""
    dt, n1, n2 = 1e-3, 3000, 3000
    sp = np.r_[np.full(n1, 5.0), np.full(n2, 1.0)]  # y can reach at most GAIN * 1 = 2
    common = dict(kp=0.5, ki=2.0, output_min=0.0, output_max=1.0)
    with_aw = PIDController(anti_windup=mode, **common)
    without = PIDController(anti_windup="none", **common)
    t, y_aw, u_aw = simulate(with_aw, sp, t_end=(n1 + n2) * dt, dt=dt)
    integral_aw = with_aw.state()["i"]
    _, y_no, _ = simulate(without, sp[:n1], t_end=n1 * dt, dt=dt)
    windup = without.state()["i"]
    assert u_aw.max() <= 1.0 and u_aw.min() >= 0.0
    # without anti-windup the integrator grows by ~ki * e * t; with it, it stays near the limit
    assert windup > 10.0
    assert integral_aw < 1.5
    # recovery after the setpoint drop: with anti-windup the output leaves saturation quickly
    without.reset()
    _, y_no, _ = simulate(without, sp, t_end=(n1 + n2) * dt, dt=dt)
    after = t >= n1 * dt
    r_aw = step_response(t[after], y_aw[after], 1.0, step_time=n1 * dt)
    r_no = step_response(t[after], y_no[after], 1.0, step_time=n1 * dt)
    assert r_aw.settling_time_s < 2.5
    # without: the wound-up integrator holds the output at the limit; it has not settled
    assert math.isnan(r_no.settling_time_s) or r_no.settling_time_s > 2 * r_aw.settling_time_s
    assert abs(y_no[-1] - 1.0) > 0.1
    assert abs(y_aw[-1] - 1.0) < 1e-2


def test_back_calculation_default_tracking_gain_is_inverse_integral_time() -> None:
    assert PIDConfig(kp=2.0, ki=1.0).effective_tracking_gain == pytest.approx(0.5)
    assert PIDConfig(kp=2.0, ki=1.0, tracking_gain=7.0).effective_tracking_gain == 7.0


def test_derivative_on_measurement_has_no_kick_on_setpoint_step() -> None:
    pid = PIDController(kp=0.0, ki=0.0, kd=5.0)
    dt = 0.01
    assert pid.update(0.2, 0.0, dt) == 0.0
    assert pid.update(0.2, 0.0, dt) == 0.0
    assert pid.update(0.2, 10.0, dt) == 0.0  # setpoint step: no derivative kick
    # a measurement change does produce derivative action, opposing the motion
    assert pid.update(0.3, 10.0, dt) == pytest.approx(-5.0 * 0.1 / dt)


def test_derivative_filter_time_constant_and_cutoff() -> None:
    fc = 2.0
    cfg = PIDConfig(kp=0.0, kd=1.0, derivative_cutoff_hz=fc)
    assert cfg.tau_d == pytest.approx(1 / (2 * math.pi * fc))
    # ramp measurement y = v t: filtered derivative approaches v with time constant tau_d
    pid = PIDController(cfg)
    dt, v = 1e-3, 0.7
    outs = [pid.update(v * k * dt, 0.0, dt) for k in range(3000)]
    d = -np.asarray(outs)
    t = np.arange(len(d)) * dt
    assert d[-1] == pytest.approx(v, rel=1e-3)
    t63 = np.interp(0.632 * v, d[1:], t[1:])
    assert t63 - dt == pytest.approx(cfg.tau_d, rel=0.03)
    unfiltered = PIDController(kp=0.0, kd=1.0)
    unfiltered.update(0.0, 0.0, dt)
    assert -unfiltered.update(v * dt, 0.0, dt) == pytest.approx(v)


def test_rate_limit_respected() -> None:
    rate = 2.0  # units / s
    pid = PIDController(kp=10.0, ki=1.0, rate_limit=rate, output_min=-1, output_max=1)
    dt = 0.01
    _, _, u = simulate(pid, 1.0, t_end=1.0, dt=dt)
    steps = np.diff(np.r_[0.0, u])
    assert np.max(np.abs(steps)) <= rate * dt + 1e-12
    assert np.isclose(np.abs(steps[:10]), rate * dt).all()  # it really is limiting


def test_output_limits() -> None:
    pid = PIDController(kp=100.0, output_min=-0.5, output_max=0.25)
    assert pid.update(0.0, 1.0, 0.01) == 0.25
    assert pid.update(0.0, -1.0, 0.01) == -0.5
    assert pid.state()["saturated"] == 1.0


def test_bumpless_gain_change_keeps_output_continuous() -> None:
    dt = 0.01
    cfg = dict(kp=1.0, ki=2.0, kd=0.0)
    pid, jumpy = PIDController(**cfg), PIDController(**cfg)
    simulate(pid, 1.0, t_end=0.3, dt=dt)
    simulate(jumpy, 1.0, t_end=0.3, dt=dt)
    u_before = pid.output
    meas = pid.state()["measurement"]
    pid.set_gains(kp=6.0, ki=0.5)
    jumpy.set_gains(bumpless=False, kp=6.0, ki=0.5)
    u_after = pid.update(meas, 1.0, dt)  # same measurement and setpoint
    u_jump = jumpy.update(meas, 1.0, dt)
    e = 1.0 - meas
    # exactly the new integral increment, no jump from the proportional term
    assert u_after - u_before == pytest.approx(0.5 * e * dt, abs=1e-12)
    assert abs(u_jump - u_before) > 1.0
    assert pid.config.kp == 6.0


def test_bumpless_change_of_derivative_gain_with_filter() -> None:
    dt = 0.01
    cfg = dict(kp=1.0, ki=2.0, kd=0.05, tau_d=0.02)
    pid, twin = PIDController(**cfg), PIDController(**cfg)
    simulate(pid, 1.0, t_end=0.3, dt=dt)
    simulate(twin, 1.0, t_end=0.3, dt=dt)
    meas, u_before = pid.state()["measurement"], pid.output
    pid.set_gains(kd=0.2)
    # the output continues smoothly: its change matches the unchanged twin's natural change
    # up to the new gain acting on the decaying filtered derivative
    d_now = pid.state()["d_measurement"]
    u_after = pid.update(meas + d_now * dt, 1.0, dt)
    u_twin = twin.update(meas + d_now * dt, 1.0, dt)
    assert abs(u_after - u_before) < 2 * abs(u_twin - u_before) + 1e-6


def test_set_gains_rejects_bad_values_and_keeps_old_gains() -> None:
    pid = PIDController(kp=1.0)
    with pytest.raises(ConfigError, match="kp"):
        pid.set_gains(kp=-1.0)
    with pytest.raises(ConfigError, match="kq"):
        pid.set_gains(kq=1.0)
    assert pid.config.kp == 1.0


def test_dt_awareness_same_continuous_behaviour() -> None:
    def run(dt: float) -> tuple[np.ndarray, np.ndarray]:
        pid = PIDController(kp=1.5, ki=3.0, kd=0.05, tau_d=0.02)
        t, y, _ = simulate(pid, 1.0, t_end=2.0, dt=dt)
        return t, y

    t_fine, y_fine = run(1e-3)
    t_coarse, y_coarse = run(5e-3)
    y_interp = np.interp(t_coarse, t_fine, y_fine)
    assert np.max(np.abs(y_interp - y_coarse)) < 0.02
    # and the integral is in seconds: same integrated value for the same constant error
    a, b = PIDController(kp=0.0, ki=1.0), PIDController(kp=0.0, ki=1.0)
    for _ in range(100):
        a.update(0.0, 1.0, 0.01)
    for _ in range(10):
        b.update(0.0, 1.0, 0.1)
    assert a.output == pytest.approx(b.output) == pytest.approx(1.0)


def test_direction_reverse_acting_loop() -> None:
    pid = PIDController(kp=1.0, ki=4.0, direction=-1)
    _, y, _ = simulate(pid, 1.0, t_end=6.0, dt=1e-3, gain=-GAIN)
    assert abs(y[-1] - 1.0) < 1e-3


def test_bias_and_feedforward() -> None:
    pid = PIDController(kp=0.0, bias=0.1, kff=0.5)
    assert pid.update(3.0, 2.0, 0.01) == pytest.approx(0.1 + 0.5 * 2.0)


def test_feedforward_table_interpolates_holds_its_ends_and_refuses_bad_points() -> None:
    table = ((0.05, -0.5), (0.1, 0.0), (0.2, 0.2))
    pid = PIDController(kp=0.0, bias=0.1, kff=1.0, feedforward_table=table)
    for sp, ff in ((0.0, -0.5), (0.075, -0.25), (0.15, 0.1), (0.2, 0.2), (0.9, 0.2)):
        assert pid.update(sp, sp, 0.01) == pytest.approx(0.1 + sp + ff)
        assert pid.state()["feedforward"] == pytest.approx(0.1 + sp + ff)
    with pytest.raises(ConfigError, match=r"feedforward_table\[1\].*does not rise"):
        PIDController(feedforward_table=((0.1, 0.0), (0.1, 1.0)))
    with pytest.raises(ConfigError, match=r"feedforward_table\[0\].*not finite"):
        PIDController(feedforward_table=((math.nan, 0.0),))
    with pytest.raises(ConfigError, match="pairs"):
        PIDController(feedforward_table=(1.0, 2.0))


def test_reference_filter_keeps_the_integrator_out_of_a_rise_the_feedforward_already_makes() -> (
    None
):
    """Exact feedforward (kff = 1 / gain) on a plant starting from rest: the plant's own rise is
    the expected response, so with the reference filter at the plant's time constant the
    feedback sees (almost) no error and nothing overshoots; acting on the raw setpoint, the
    integrator winds up during the rise and the output overshoots."""
    gains = {"kp": 0.5, "ki": 4.0, "kff": 1.0 / GAIN, "anti_windup": "back_calculation"}
    _, y_raw, _ = simulate(PIDController(**gains), 1.0, t_end=4.0, dt=0.01)
    filtered = PIDController(**gains, setpoint_tau_s=TAU)
    _, y_ref, _ = simulate(filtered, 1.0, t_end=4.0, dt=0.01)
    assert y_raw.max() > 1.1  # one degree of freedom: overshoot from the wound-up integrator
    assert y_ref.max() < 1.005 and abs(y_ref[-1] - 1.0) < 0.01
    assert abs(filtered.state()["i"]) < 0.01
    assert filtered.state()["reference"] == pytest.approx(1.0, abs=1e-3)
    with pytest.raises(ConfigError, match="setpoint_tau_s"):
        PIDController(setpoint_tau_s=-1.0)


def test_nan_measurement_holds_output_and_bad_inputs_raise() -> None:
    pid = PIDController(kp=1.0)
    u = pid.update(0.0, 1.0, 0.01)
    assert pid.update(float("nan"), 1.0, 0.01) == u
    assert pid.state()["held_steps"] == 1
    with pytest.raises(ConfigError, match="dt"):
        pid.update(0.0, 1.0, 0.0)
    with pytest.raises(ConfigError, match="setpoint"):
        pid.update(0.0, float("inf"), 0.01)


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"kp": -1.0}, "kp"),
        ({"ki": float("nan")}, "ki"),
        ({"output_min": 1.0, "output_max": 0.0}, "output_min"),
        ({"rate_limit": 0.0}, "rate_limit"),
        ({"anti_windup": "integrate"}, "anti_windup"),
        ({"direction": 2}, "direction"),
        ({"derivative_cutoff_hz": -3.0}, "derivative_cutoff_hz"),
        ({"kp": "fast"}, "kp"),
    ],
)
def test_config_validation_names_bad_value(params: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        PIDConfig(**params)


def test_reset_clears_state_and_preloads_output() -> None:
    pid = PIDController(kp=1.0, ki=1.0, output_min=-1, output_max=1)
    for _ in range(10):
        pid.update(0.0, 1.0, 0.1)
    pid.reset()
    assert pid.state()["i"] == 0.0 and pid.output == 0.0
    pid.reset(output=0.4)
    assert pid.update(1.0, 1.0, 0.1) == pytest.approx(0.4)  # zero error holds the preload


def test_fixed_controller_set_gains_and_bumpless_switch_to_pid() -> None:
    fixed = controllers.make("fixed", value=0.3)
    fixed.set_gains(value=0.45)  # type: ignore[attr-defined]
    assert fixed.update(0.0, 1.0, 0.05) == 0.45
    with pytest.raises(ConfigError, match="gain"):
        fixed.set_gains(gain=1.0)  # type: ignore[attr-defined]
    # switching controllers live: the PID starts from the fixed output
    pid = PIDController(kp=2.0, ki=1.0, output_min=-1, output_max=1)
    pid.reset(output=0.45)
    assert pid.update(0.5, 0.5, 0.05) == pytest.approx(0.45)


def test_pid_update_benchmark_runs() -> None:
    from embodied.apps.bench._pid import pid_update_us, run

    assert pid_update_us(n=200, repeats=3) > 0.0
    assert set(run(quick=True)) == {"pid_update_us"}
