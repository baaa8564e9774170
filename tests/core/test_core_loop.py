"""The closed loop: steering, safety, recording, stopping, and refusing bad input."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from core_plant import FirstOrderEnv, GainPolicy, PController, VelocityConcept

from embodied.errors import ActionError, CompatibilityError, ConfigError
from embodied.loop import Steering, rollout


class ClipFilter:
    def __init__(self, limit: float) -> None:
        self.limit, self.resets = limit, 0

    def reset(self) -> None:
        self.resets += 1

    def __call__(self, action: np.ndarray, obs: dict) -> np.ndarray:
        return np.clip(action, -self.limit, self.limit)


def test_open_loop_records_every_step_and_replans_per_chunk() -> None:
    env, policy = FirstOrderEnv(), GainPolicy()
    ep = rollout(env, policy, max_steps=7, stop_on_success=False)
    assert len(ep) == 7
    assert ep.actions.shape == (7, 1) and ep.observations["state"].shape == (7, 1)
    assert policy.chunks == math.ceil(7 / policy.n_action_steps)
    assert np.isnan(ep.measurements).all() and ep.meta["reason"] == "max_steps"
    assert set(ep.timings_ms) == {"control", "policy", "safety", "env", "total"}
    assert ep.knobs["alpha"].shape == (7, 1) and not ep.success


def test_steering_drives_knob_and_tracks_setpoint() -> None:
    env, policy = FirstOrderEnv(goal=1e9), GainPolicy()
    steer = Steering(VelocityConcept(), PController(kp=2.0), knob="alpha", setpoint=1.0)
    ep = rollout(env, policy, steering=steer, max_steps=30)
    # knob values are the controller commands, so they change and stay in bounds
    alpha = ep.knobs["alpha"][:, 0]
    assert alpha[0] == pytest.approx(2.0)  # kp * (1 - 0) at the first step
    assert np.all(np.abs(alpha) <= 5.0) and np.ptp(alpha) > 0.1
    assert np.all(ep.setpoints == 1.0)
    # the measurement at t+1 is the velocity produced by the action at t
    vel = ep.measurements[1:]
    x = ep.observations["state"][:, 0]
    np.testing.assert_allclose(vel, np.diff(x) * env.control_rate_hz, rtol=1e-5, atol=1e-5)


class GappedVelocity(VelocityConcept):
    """Undefined (NaN) on steps 5-9, like the cruise height over the target."""

    def reset(self) -> None:
        self.k = 0

    def measure(self, obs: dict[str, Any], info: dict[str, Any], dt: float) -> float:
        self.k += 1
        return math.nan if 5 <= self.k - 1 < 10 else super().measure(obs, info, dt)


class RecordingP(PController):
    def reset(self) -> None:
        self.seen: list[float] = []

    def update(self, measurement: float, setpoint: float, dt: float) -> float:
        self.seen.append(measurement)
        return 1.5 if measurement != measurement else super().update(measurement, setpoint, dt)


@pytest.mark.parametrize("rest", [None, -0.25])
def test_steering_rest_commands_the_knob_where_the_concept_is_undefined(
    rest: float | None,
) -> None:
    env, policy, ctrl = FirstOrderEnv(goal=1e9), GainPolicy(), RecordingP(kp=2.0)
    steer = Steering(GappedVelocity(), ctrl, knob="alpha", setpoint=1.0, rest=rest)
    ep = rollout(env, policy, steering=steer, max_steps=15)
    alpha, gap = ep.knobs["alpha"][:, 0], slice(5, 10)
    assert np.isnan(ep.measurements[gap]).all() and np.isfinite(ep.measurements[10:]).all()
    if rest is None:  # the controller sees the gap (and here answers it with 1.5)
        assert len(ctrl.seen) == 15 and np.allclose(alpha[gap], 1.5)
    else:  # the rest value, and the controller is not asked
        assert len(ctrl.seen) == 10 and not any(m != m for m in ctrl.seen)
        assert np.allclose(alpha[gap], rest)
    assert not np.allclose(alpha[10:], alpha[gap][0])  # control resumes after the gap


def test_setpoint_schedule_uses_episode_time() -> None:
    env, policy = FirstOrderEnv(goal=1e9), GainPolicy()
    steer = Steering(
        VelocityConcept(), PController(1.0), setpoint=lambda t: 0.0 if t < 1.0 else 2.0
    )
    ep = rollout(env, policy, steering=steer, max_steps=20)
    assert (ep.setpoints[:10] == 0.0).all() and (ep.setpoints[10:] == 2.0).all()


def test_safety_filter_sits_between_policy_and_env() -> None:
    env, policy = FirstOrderEnv(goal=1e9), GainPolicy()
    policy.set_knob("alpha", 4.0)
    flt = ClipFilter(1.5)
    # reset() would clear the knob; set a fixed controller output instead
    steer = Steering(VelocityConcept(), lambda_controller(4.0), knob="alpha")
    ep = rollout(env, policy, steering=steer, safety=flt, max_steps=5)
    assert flt.resets == 1
    assert (ep.raw_actions == 4.0).all() and (ep.actions == 1.5).all()


def lambda_controller(value: float):
    class Const:
        def reset(self) -> None: ...

        def update(self, m: float, s: float, dt: float) -> float:
            return value

    return Const()


def test_stops_on_success_and_callbacks_see_each_step() -> None:
    env, policy = FirstOrderEnv(goal=1.0), GainPolicy()
    seen = []
    steer = Steering(VelocityConcept(), lambda_controller(5.0))
    ep = rollout(env, policy, steering=steer, callbacks=[lambda r: seen.append(r.t)])
    assert ep.success and ep.meta["reason"] == "success"
    assert ep.success_step == len(ep) - 1 and seen == list(range(len(ep)))


def test_should_stop_ends_episode() -> None:
    env, policy = FirstOrderEnv(), GainPolicy()
    calls = iter(range(100))
    ep = rollout(env, policy, should_stop=lambda: next(calls) >= 3)
    assert len(ep) == 3 and ep.meta["reason"] == "stopped"


class BadPolicy(GainPolicy):
    def __init__(self, chunk: np.ndarray) -> None:
        super().__init__()
        self.chunk = chunk

    def predict_action_chunk(self, obs: dict) -> np.ndarray:
        return self.chunk


def test_nan_action_is_refused_naming_the_dim() -> None:
    with pytest.raises(ActionError, match=r"non-finite.*'u'"):
        rollout(FirstOrderEnv(), BadPolicy(np.array([[np.nan]])), max_steps=3)


def test_wrong_chunk_shape_is_refused() -> None:
    with pytest.raises(CompatibilityError, match=r"shape \(4, 2\)"):
        rollout(FirstOrderEnv(), BadPolicy(np.zeros((4, 2))), max_steps=3)


def test_action_dim_mismatch_refused_before_first_step() -> None:
    env, policy = FirstOrderEnv(), GainPolicy()
    policy.action_dim = 3
    with pytest.raises(CompatibilityError, match="3-dim actions"):
        rollout(env, policy)
    assert env.x == 0.0  # never reset or stepped


def test_steering_unknown_knob_and_bad_knob_values() -> None:
    steer = Steering(VelocityConcept(), PController(1.0), knob="beta")
    with pytest.raises(CompatibilityError, match="no knob 'beta'"):
        rollout(FirstOrderEnv(), GainPolicy(), steering=steer)
    policy = GainPolicy()
    with pytest.raises(ConfigError, match=r"outside"):
        policy.set_knob("alpha", 9.0)
    with pytest.raises(ConfigError, match="non-finite"):
        policy.set_knob("alpha", float("nan"))
    with pytest.raises(ConfigError, match="max_steps"):
        rollout(FirstOrderEnv(), GainPolicy(), max_steps=0)


class SeedRecordingPolicy(GainPolicy):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[object] = []

    def reset(self) -> None:
        super().reset()
        self.events.append("reset")

    def seed_episode(self, seed: int) -> None:
        self.events.append(seed)


def test_rollout_seeds_the_policy_after_reset_with_the_episode_seed() -> None:
    env, policy = FirstOrderEnv(), SeedRecordingPolicy()
    rollout(env, policy, seed=17, max_steps=2)
    rollout(env, policy, max_steps=2)  # no seed: the policy's randomness is left alone
    assert policy.events == ["reset", 17, "reset"]
