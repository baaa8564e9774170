"""robosuite adapter smoke test: real robosuite 1.4 Lift on MuJoCo, one rendered frame."""

from __future__ import annotations

import numpy as np
import pytest

import sim
from embodied.errors import ActionError, UnknownNameError
from embodied.loop import rollout
from tests.conftest import require


@pytest.fixture(scope="module")
def lift() -> object:
    require("robosuite")
    env = sim.make("robosuite:Lift", camera=["agentview"], image_size=48, max_episode_steps=20)
    yield env
    env.close()


def test_lift_follows_the_contract(lift: object) -> None:
    env = lift
    assert env.env_id == "robosuite:Lift" and env.control_rate_hz == 20.0
    assert env.action_spec.names == ("dx", "dy", "dz", "droll", "dpitch", "dyaw", "gripper")
    names = env.observation_spec.state.names
    assert "robot0_eef_pos.0" in names and "cube_pos.2" in names
    assert env.observation_spec.state.units[names.index("robot0_eef_pos.0")] == "m"
    obs, info = env.reset(seed=0)
    env.observation_spec.validate(obs)
    assert obs["instruction"] == "lift the cube" and info["success"] is False
    eef = obs["state"][names.index("robot0_eef_pos.0") : names.index("robot0_eef_pos.0") + 3]
    assert np.allclose(eef, info["ee_pos"], atol=1e-5)

    up = np.zeros(7)
    up[2] = 1.0  # OSC_POSE: +z
    z0 = info["ee_pos"][2]
    for _ in range(4):
        obs, _reward, _terminated, _truncated, info = env.step(up)
    assert info["ee_pos"][2] > z0 + 0.01 and info["ee_vel"][2] > 0
    img = obs["image.agentview"]
    assert img.shape == (48, 48, 3) and img.dtype == np.uint8 and img.std() > 5
    frame = env.render()
    assert frame.shape == (48, 48, 3)
    # upright (robosuite renders upside down): the dark robot base is at the top of the
    # agentview frame, the white table at the bottom
    assert frame[:8].mean() < frame[-8:].mean() - 50
    assert img[:8].mean() < img[-8:].mean() - 50

    with pytest.raises(ActionError, match="shape"):
        env.step(np.zeros(3))
    o1, _ = env.reset(seed=4)
    o2, _ = env.reset(seed=4)
    assert np.array_equal(o1["state"], o2["state"])  # same seed, same cube placement


def test_lift_runs_in_the_loop(lift: object) -> None:
    import policies

    ep = rollout(lift, policies.load("random", env=lift, seed=0), seed=1, max_steps=3)
    assert len(ep) == 3 and ep.observations["image.agentview"].shape == (3, 48, 48, 3)


def test_unknown_robosuite_env_lists_envs() -> None:
    require("robosuite")
    with pytest.raises(UnknownNameError, match="Lift"):
        sim.make("robosuite:Lfit")
    with pytest.raises(UnknownNameError, match="OSC_POSE"):
        sim.make("robosuite:Lift", controller="OSC_FANCY")
