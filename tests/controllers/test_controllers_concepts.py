"""Concept signals on synthetic info sequences with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from embodied.concepts import CONCEPTS, EESpeed, Smoothness, make_concept
from embodied.contracts import Concept
from embodied.errors import ConfigError, UnknownNameError


def test_registry() -> None:
    assert {"ee_speed", "ee_height", "smoothness"} <= set(CONCEPTS.names())
    for name in ("ee_speed", "ee_height", "smoothness"):
        assert isinstance(make_concept(name), Concept)
    with pytest.raises(UnknownNameError, match="ee_speed"):
        make_concept("speed")


def test_ee_speed_norm_and_axes() -> None:
    c = make_concept("ee_speed")
    assert c.measure({}, {"ee_vel": [0.3, 0.4, 0.0]}, 0.05) == pytest.approx(0.5)
    planar = EESpeed(axes=(0, 1))
    assert planar.measure({}, {"ee_vel": np.array([0.3, 0.4, 1.2])}, 0.05) == pytest.approx(0.5)


def test_ee_speed_ema_step_response_matches_time_constant() -> None:
    tau, dt = 0.2, 0.01
    c = EESpeed(filter_tau_s=tau)
    c.measure({}, {"ee_vel": [0.0, 0.0, 0.0]}, dt)
    vals = [c.measure({}, {"ee_vel": [1.0, 0.0, 0.0]}, dt) for _ in range(200)]
    # backward-Euler EMA: y_k = 1 - (tau / (tau + dt))^k
    k = round(tau / dt)
    assert vals[k - 1] == pytest.approx(1 - (tau / (tau + dt)) ** k)
    assert vals[k - 1] == pytest.approx(1 - math.exp(-1), abs=0.02)
    c.reset()
    assert c.measure({}, {"ee_vel": [0.0, 2.0, 0.0]}, dt) == 2.0  # reset clears the filter


def test_ee_height() -> None:
    c = make_concept("ee_height")
    assert c.measure({}, {"ee_pos": (0.1, -0.2, 0.83)}, 0.05) == pytest.approx(0.83)


def test_ee_height_away_from_the_target_only() -> None:
    """With a cruise radius the height is NaN while the fingertip is over the target (the
    descent onto it), the height elsewhere; the radius and the info key are checked."""
    c = make_concept("ee_height", cruise_radius_m=0.05)
    far = {"ee_pos": (0.1, -0.2, 0.13), "target_dist_xy": 0.2}
    assert c.measure({}, far, 0.05) == pytest.approx(0.13)
    assert math.isnan(c.measure({}, {**far, "target_dist_xy": 0.049}, 0.05))
    with pytest.raises(ConfigError, match="target_dist_xy"):
        c.measure({}, {"ee_pos": (0.1, -0.2, 0.13)}, 0.05)
    with pytest.raises(ConfigError, match="cruise_radius_m") as exc:
        make_concept("ee_height", cruise_radius_m=-0.1)
    assert exc.value.fix


def test_missing_info_key_names_it() -> None:
    with pytest.raises(ConfigError, match="ee_vel"):
        make_concept("ee_speed").measure({}, {"success": False}, 0.05)
    with pytest.raises(ConfigError, match="filter_tau_s"):
        EESpeed(filter_tau_s=-1)
    with pytest.raises(ConfigError, match="signal"):
        Smoothness(signal="snap")


def test_jerk_of_cubic_trajectory() -> None:
    # position x = j t^3 / 6 -> velocity j t^2 / 2, acceleration j t, jerk j (constant)
    j, dt = 3.0, 0.02
    c = Smoothness()
    assert c.units == "m/s^3"
    vals = [c.measure({}, {"ee_vel": [0.0, j * (k * dt) ** 2 / 2, 0.0]}, dt) for k in range(50)]
    assert vals[0] == vals[1] == 0.0  # not enough history yet
    assert np.allclose(vals[2:], j)


def test_accel_of_constant_acceleration_and_zero_jerk() -> None:
    a, dt = 0.8, 0.05
    acc, jerk = Smoothness(signal="accel"), Smoothness(signal="jerk")
    for k in range(20):
        info = {"ee_vel": [a * k * dt, 0.0, 0.0]}
        va, vj = acc.measure({}, info, dt), jerk.measure({}, info, dt)
    assert va == pytest.approx(a)
    assert vj == pytest.approx(0.0, abs=1e-9)


def test_action_change_from_recorded_actions() -> None:
    c = Smoothness(signal="action_change")
    assert c.measure({}, {}, 0.05) == 0.0
    c.record_action(np.array([0.0, 0.0]))
    c.record_action(np.array([0.3, 0.4]))
    assert c.measure({}, {}, 0.05) == pytest.approx(0.5)
    c.record_action(np.array([0.3, 0.4]))
    assert c.measure({}, {}, 0.05) == pytest.approx(0.0)
    c.reset()
    assert c.measure({}, {}, 0.05) == 0.0
