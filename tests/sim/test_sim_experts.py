"""Scripted experts: success rates, route-class diversity, speed tracking, shifted scenes."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import policies
import sim
from embodied.loop import rollout
from sim.mujoco import ROUTES, SCENES, classify_route


def test_classify_route_on_synthetic_paths() -> None:
    ys = np.linspace(-0.3, 0.3, 13)
    for x, label in ((-0.32, "left"), (0.0, "center"), (0.31, "right")):
        assert classify_route(np.stack([np.full_like(ys, x), ys], 1)) == label
    assert classify_route([[0.0, -0.3], [0.1, -0.2]]) == "none"
    # the crossing point is interpolated between samples
    assert classify_route([[-0.5, -0.1], [0.5, 0.1]]) == "center"
    with pytest.raises(ValueError, match="shape"):
        classify_route(np.zeros(5))


def test_reach_around_expert_succeeds_with_three_route_classes() -> None:
    env = sim.make("mujoco:reach_around")
    expert = policies.load("expert", env=env)
    results, routes, speeds = [], Counter(), []
    for seed in range(40):
        ep = rollout(env, expert, seed=seed)
        label = classify_route(ep.observations["state"][:, :2])
        assert label == expert.current_route  # the path goes where the expert meant to go
        results.append(ep.success)
        routes[label] += 1
        speeds.append(expert.current_speed)
    assert np.mean(results) >= 0.95, results
    assert set(routes) == set(ROUTES) and min(routes.values()) >= 4, routes
    assert max(speeds) - min(speeds) > 0.1  # demonstrations at varied speeds (m/s)


@pytest.mark.parametrize("route", ROUTES)
def test_reach_around_fixed_route_and_speed(route: str) -> None:
    env = sim.make("mujoco:reach_around")
    expert = policies.load("expert", env=env, route=route, speed=0.3)
    ep = rollout(env, expert, seed=11)
    assert ep.success and classify_route(ep.observations["state"][:, :2]) == route
    speeds = np.linalg.norm(ep.observations["state"][:, 2:4], axis=1)
    assert np.median(speeds) == pytest.approx(0.3, rel=0.15)


@pytest.mark.parametrize("scene", ["block_left", "block_center", "block_right"])
def test_shifted_scene_blocks_exactly_its_route(scene: str) -> None:
    closed = SCENES[scene]
    env = sim.make("mujoco:reach_around", scene=scene)
    for route in ROUTES:
        expert = policies.load("expert", env=env, route=route, speed=0.4)
        ep = rollout(env, expert, seed=5)
        if route in closed:
            assert not ep.success and ep.final_info["blocked"] and ep.final_info["collided"]
            assert ep.meta["reason"] == "truncated"
        else:
            assert ep.success and not ep.final_info["blocked"]
    aware = policies.load("expert", env=env, avoid_blocked=True)
    assert all(rollout(env, aware, seed=s).success for s in range(6))


def test_terminate_on_block_ends_the_episode_at_the_wall() -> None:
    env = sim.make("mujoco:reach_around", terminate_on_block=True)
    expert = policies.load("expert", env=env, route="left", speed=0.4)
    ep = rollout(env, expert, seed=0, reset_options={"scene": "block_left"})
    assert not ep.success and ep.meta["reason"] == "terminated" and len(ep) < 60


def test_arm_reach_expert_success_rate_and_speed_tracking() -> None:
    env = sim.make("mujoco:arm_reach", camera=False)
    expert = policies.load("expert", env=env)
    ok, targets = [], Counter()
    for seed in range(24):
        ep = rollout(env, expert, seed=seed)
        ok.append(ep.success)
        targets[ep.instruction] += 1
        assert ep.final_info["target_dist"] < 0.025 or not ep.success
    assert np.mean(ok) >= 0.95, ok
    assert len(targets) == 4  # every colour gets named
    for speed in (0.05, 0.2):
        slow = policies.load("expert", env=env, speed=speed)
        ep = rollout(env, slow, seed=3)
        ee_speed = np.linalg.norm(ep.observations["state"][:, 11:14], axis=1)
        cruise = ee_speed[3 : max(4, len(ep) - 8)]
        assert ep.success and np.median(cruise) == pytest.approx(speed, rel=0.1)


def test_arm_reach_cone_expert_is_memoryless_and_succeeds() -> None:
    from embodied.errors import ConfigError

    env = sim.make("mujoco:arm_reach", camera=False)
    cone = policies.load("expert", env=env, approach="cone", speed=0.15)
    ok = [rollout(env, cone, seed=seed).success for seed in range(12)]
    assert np.mean(ok) >= 0.95, ok
    # the running expert and a fresh one agree in every state: no hidden phase
    for approach, memoryless in (("cone", True), ("waypoints", False)):
        running = policies.load("expert", env=env, approach=approach, speed=0.15)
        obs, _ = env.reset(seed=5)
        agree = []
        for _ in range(40):
            action = running.predict_action_chunk(obs)
            fresh = policies.load("expert", env=env, approach=approach, speed=0.15)
            agree.append(np.allclose(fresh.predict_action_chunk(obs), action))
            obs, *_ = env.step(action[0])
        assert all(agree) is memoryless, (approach, agree)
    with pytest.raises(ConfigError, match="approach"):
        policies.load("expert", env=env, approach="spiral")
    with pytest.raises(ConfigError, match="cone_radius"):
        policies.load("expert", env=env, approach="cone", cone_radius=0.0)


def test_random_and_zero_policies_are_seeded_and_bounded() -> None:
    env = sim.make("mujoco:arm_reach", camera=False)
    a = rollout(env, policies.load("random", env=env, seed=1), seed=0, max_steps=10).actions
    b = rollout(env, policies.load("random", env=env, seed=1), seed=0, max_steps=10).actions
    assert np.array_equal(a, b)
    assert (a >= env.action_spec.low_array).all() and (a <= env.action_spec.high_array).all()
    z = rollout(env, policies.load("zero", env=env), seed=0, max_steps=5)
    assert not z.success and np.allclose(z.actions, 0.0)
