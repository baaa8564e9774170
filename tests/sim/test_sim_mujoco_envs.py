"""MuJoCo envs: contract, determinism, bad input, rendering (real physics, real GL)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import policies
import sim
from embodied.contracts import Env, Policy
from embodied.errors import ActionError, ConfigError, RenderError, UnknownNameError
from embodied.loop import rollout
from sim.mujoco import MujocoEnv

TASKS = ("reach_around", "arm_reach")


def _expert_episode(task: str, seed: int, **make_kw: object) -> tuple[np.ndarray, np.ndarray]:
    env = sim.make(f"mujoco:{task}", **make_kw)
    ep = rollout(env, policies.load("expert", env=env), seed=seed)
    env.close()
    return ep.observations["state"], ep.actions


@pytest.mark.parametrize("task", TASKS)
def test_same_seed_gives_identical_episodes(task: str) -> None:
    s1, a1 = _expert_episode(task, seed=7, camera=False)
    s2, a2 = _expert_episode(task, seed=7, camera=False)
    s3, _ = _expert_episode(task, seed=8, camera=False)
    assert s1.shape == s2.shape and np.array_equal(s1, s2) and np.array_equal(a1, a2)
    assert s1.shape != s3.shape or not np.array_equal(s1, s3)


@pytest.mark.parametrize("task", TASKS)
def test_reset_same_seed_on_one_env_repeats_scene_and_images(task: str) -> None:
    env = sim.make(f"mujoco:{task}", camera=True, image_size=48)
    o1, _i1 = env.reset(seed=3)
    for _ in range(3):
        env.step(env.action_spec.high_array * 0.5)
    o2, _i2 = env.reset(seed=3)
    assert np.array_equal(o1["state"], o2["state"])
    cam = env.observation_spec.image_keys[0]
    assert np.array_equal(o1[cam], o2[cam])
    assert o1["instruction"] == o2["instruction"]
    o3, _ = env.reset(seed=4)  # another scene (arm_reach: same arm pose, other cubes)
    assert not np.array_equal(o1[cam], o3[cam])
    env.close()


@pytest.mark.parametrize("task", TASKS)
def test_observations_and_info_follow_the_contract(task: str) -> None:
    env = sim.make(f"mujoco:{task}", camera=True, image_size=(40, 56))
    assert isinstance(env, MujocoEnv) and env.env_id == f"mujoco:{task}"
    obs, info = env.reset(seed=0)
    env.observation_spec.validate(obs)
    assert env.observation_space.contains({k: v for k, v in obs.items()})
    for _ in range(5):
        obs, _reward, _terminated, _truncated, info = env.step(env.action_space.sample() * 0)
    env.observation_spec.validate(obs)
    img = obs[env.observation_spec.image_keys[0]]
    assert img.shape == (40, 56, 3) and img.dtype == np.uint8 and img.std() > 5  # not blank
    assert isinstance(info["success"], bool)
    assert np.shape(info["ee_pos"]) == (3,) and np.shape(info["ee_vel"]) == (3,)
    assert obs["state"].dtype == np.float32
    assert env.control_rate_hz == 20.0 and env.dt == pytest.approx(0.05)
    assert env.substeps * env.physics_timestep == pytest.approx(env.dt)
    desc = env.describe()
    assert desc["action"]["units"][0] == "m/s"
    env.close()


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.filterwarnings("ignore:.*infinity")
def test_passes_gymnasium_env_checker(task: str) -> None:
    from gymnasium.utils.env_checker import check_env

    env = sim.make(f"mujoco:{task}", camera=True, image_size=24)
    check_env(env, skip_render_check=True)  # includes gymnasium's own determinism checks
    env.close()


def test_reach_around_state_fields_match_physics() -> None:
    env = sim.make("mujoco:reach_around")
    obs, info = env.reset(seed=1, options={"start": (0.05, -0.3), "goal": (-0.1, 0.3)})
    names = env.observation_spec.state.names
    s = dict(zip(names, obs["state"].tolist(), strict=True))
    assert s["pos_x"] == pytest.approx(0.05) and s["goal_y"] == pytest.approx(0.3)
    assert s["goal_dx"] == pytest.approx(-0.15, abs=1e-6)
    for _ in range(10):
        obs, *_rest, info = env.step(np.array([0.3, 0.0]))
    s = dict(zip(names, obs["state"].tolist(), strict=True))
    assert s["vel_x"] == pytest.approx(0.3, abs=0.03)  # velocity actuator tracks m/s command
    assert info["ee_pos"][0] == pytest.approx(s["pos_x"], abs=1e-6)
    assert info["ee_pos"][2] == pytest.approx(0.025)


def test_arm_reach_tracks_cartesian_velocity_and_reports_caption_state() -> None:
    env = sim.make("mujoco:arm_reach", camera=False, target="blue")
    obs, info = env.reset(seed=2)
    assert obs["instruction"] == "reach the blue cube" and info["target"] == "blue"
    assert info["closest"] in ("red", "green", "blue", "yellow")
    start = info["ee_pos"].copy()
    for _ in range(10):
        obs, *_rest, info = env.step(np.array([0.0, 0.1, 0.0, -1.0]))
    moved = info["ee_pos"] - start
    assert moved[1] == pytest.approx(0.05, abs=0.01)  # 0.1 m/s for 0.5 s
    assert abs(moved[0]) < 0.01 and abs(moved[2]) < 0.01
    assert info["ee_vel"][1] == pytest.approx(0.1, abs=0.02)
    fingers = obs["state"][env.observation_spec.state.index("gripper")]
    for _ in range(10):
        obs, *_rest, info = env.step(np.array([0.0, 0.0, 0.0, 1.0]))  # close the gripper
    closed = obs["state"][env.observation_spec.state.index("gripper")]
    assert fingers == pytest.approx(0.005, abs=1e-3) and closed < -0.015
    obs, info = env.reset(seed=2, options={"target": "red"})
    assert obs["instruction"] == "reach the red cube"
    assert set(env.unwrapped.task.caption_state()["cubes"]) == {"red", "green", "blue", "yellow"}


ARM_CUBES = {
    "red": (0.25, -0.12),
    "green": (0.38, 0.1),
    "blue": (0.40, -0.12),
    "yellow": (0.25, 0.12),
}


def test_arm_reach_jitter_moves_each_placed_cube_per_seed_within_bounds() -> None:
    from embodied.apps.training.training_vla import FIXED_LAYOUT, LAYOUT_JITTER_M, steer_env
    from sim.mujoco.arm_reach import COLORS, CUBE_HALF_M

    env, reset, _targets = steer_env("mujoco:arm_reach", None, "jittered")
    assert reset["jitter"] == LAYOUT_JITTER_M
    layouts = []
    for seed in range(12):
        env.reset(seed=seed, options=reset)
        cubes = np.asarray(env.unwrapped.task.cube_pos)[:, :2]
        fixed = np.array([FIXED_LAYOUT[c] for c in COLORS])
        assert np.abs(cubes - fixed).max() <= LAYOUT_JITTER_M + 1e-12
        gaps = [np.linalg.norm(a - b) for i, a in enumerate(cubes) for b in cubes[i + 1 :]]
        assert min(gaps) > 2 * CUBE_HALF_M  # cubes never overlap
        layouts.append(cubes.round(6).tobytes())
    assert len(set(layouts)) == 12  # distinct scenes per seed
    env.reset(seed=3, options=reset)
    again = np.asarray(env.unwrapped.task.cube_pos)[:, :2].round(6).tobytes()
    assert again == layouts[3]  # the seed decides the scene
    for bad in (-0.01, 0.2, "far"):
        with pytest.raises(ConfigError, match="jitter") as exc:
            env.reset(seed=0, options={**reset, "jitter": bad})
        assert exc.value.fix
    with pytest.raises(ConfigError, match="'fixed', 'jittered' or 'random'"):
        steer_env("mujoco:arm_reach", None, "wobbly")
    _env, reset, _ = steer_env("mujoco:arm_reach", None, "jittered", 0.01)
    assert reset["jitter"] == 0.01
    from embodied.apps.training.config_vla import TinyVLAConfig

    with pytest.raises(ConfigError, match="jitter=0.2"):
        TinyVLAConfig(jitter=0.2)


def test_arm_reach_level_expert_cruises_at_its_drawn_hover_height_from_a_set_start() -> None:
    """The height concept's data: from the ``start`` reset option (beside the cubes) the
    ``level`` expert climbs or sinks to the hover height it drew and flies level there, measured
    away from the target; it still reaches the cube. Bad starts and ranges are refused."""
    from embodied.apps.training.training_vla import steer_env
    from embodied.concepts import make_concept
    from embodied.loop import Steering
    from sim.mujoco.arm_reach import CUBE_HALF_M, TARGET_ABOVE_TOP_M

    env, reset, targets = steer_env("mujoco:arm_reach", 32, "jittered", 0.01)
    reset["start"] = [0.33, -0.28, 0.15]
    expert = policies.load("expert", env=env, speed=0.1, approach="level",
                           hover_range=(0.03, 0.15))  # fmt: skip
    _obs, info = env.reset(seed=0, options=reset)
    assert np.allclose(info["ee_pos"], [0.33, -0.28, 0.15], atol=2e-3)  # the start, not home
    steering = Steering(make_concept("ee_height", cruise_radius_m=0.05), None, knob="alpha",
                        setpoint=0.1)  # fmt: skip
    drawn = []
    for k, target in enumerate(targets):
        ep = rollout(env, expert, seed=k, reset_options={**reset, "target": target},
                     steering=steering, record_images=False)  # fmt: skip
        assert ep.success
        assert expert.hover_z == pytest.approx(
            2 * CUBE_HALF_M + TARGET_ABOVE_TOP_M + expert.current_hover
        )
        y = np.asarray(ep.measurements)
        cruise = y[np.isfinite(y)][-5:]  # the last cruise steps, before the descent
        assert np.abs(cruise - expert.hover_z).max() < 0.004, (target, cruise, expert.hover_z)
        assert np.isnan(y[-3:]).all()  # over the target the height is not measured
        drawn.append(expert.current_hover)
    assert all(0.03 <= h <= 0.15 for h in drawn) and len(set(drawn)) == len(drawn)
    for bad in ([0.33, 0.0], [0.9, 0.0, 0.15], [0.33, 0.0, "x"]):
        with pytest.raises(ConfigError, match="start=") as exc:
            env.reset(seed=0, options={**reset, "start": bad})
        assert exc.value.fix
    with pytest.raises(ConfigError, match="hover_range"):
        policies.load("expert", env=env, hover_range=(0.1, 0.5))


def _drive_to(
    env: Env, info: dict[str, Any], point: np.ndarray, max_steps: int = 100
) -> list[tuple[bool, dict[str, Any]]]:
    """Step velocity actions (from ``info["ee_pos"]``) until the fingertip is at ``point``;
    returns each step's ``(terminated, info)``."""
    out: list[tuple[bool, dict[str, Any]]] = []
    for _ in range(max_steps):
        delta = point - info["ee_pos"]
        dist = float(np.linalg.norm(delta))
        if dist < 0.004:
            break
        v = delta / max(dist, 1e-9) * min(0.2, 3.0 * dist)
        _obs, _r, terminated, _trunc, info = env.step(np.r_[v, -1.0])
        out.append((terminated, info))
        if terminated:
            break
    return out


def test_arm_reach_reports_which_cube_was_reached() -> None:
    from sim.mujoco.arm_reach import CUBE_HALF_M, TARGET_ABOVE_TOP_M

    env = sim.make("mujoco:arm_reach", camera=False)
    # The expert reaches the target: reached names it, no wrong cube.
    opts = {"cubes": ARM_CUBES, "target": "blue"}
    ep = rollout(env, policies.load("expert", env=env, speed=0.2), seed=0, reset_options=opts)
    assert ep.success and ep.meta["reason"] in ("success", "terminated")
    assert ep.final_info["reached"] == "blue" and ep.final_info["wrong_cube_reached"] is False

    # Target red, but the fingertip goes to green's grasp point (above its top face).
    _obs, info = env.reset(seed=0, options={"cubes": ARM_CUBES, "target": "red"})
    assert info["reached"] == "" and info["wrong_cube_reached"] is False
    above = CUBE_HALF_M * 2 + TARGET_ABOVE_TOP_M  # grasp point height above the table
    green = np.array([*ARM_CUBES["green"], above])
    steps = _drive_to(env, info, green + np.array([0.0, 0.0, 0.08]))  # hover: nothing reached yet
    info = steps[-1][1]
    assert info["reached"] == "" and info["wrong_cube_reached"] is False
    steps = _drive_to(env, info, green)
    info = steps[-1][1]
    hits = [i for i, (_t, inf) in enumerate(steps) if inf["wrong_cube_reached"]]
    assert hits and hits[0] > 0, "never came within reach of green's grasp point"
    first = steps[hits[0]][1]
    assert np.linalg.norm(first["ee_pos"] - green) < 0.025  # latched exactly when in reach
    assert np.linalg.norm(steps[hits[0] - 1][1]["ee_pos"] - green) >= 0.025
    assert info["reached"] == "green" and info["wrong_cube_reached"] is True
    assert not any(t for t, _ in steps) and not any(inf["success"] for _, inf in steps)
    steps = _drive_to(env, info, green + np.array([0.0, 0.0, 0.1]))  # away again: still latched
    info = steps[-1][1]
    assert np.linalg.norm(info["ee_pos"] - green) > 0.09
    assert info["reached"] == "green" and info["wrong_cube_reached"] is True
    assert info["success"] is False
    # Then the target: success ends the episode; the first cube reached stays green.
    red = np.array([*ARM_CUBES["red"], above])
    steps = _drive_to(env, info, red + np.array([0.0, 0.0, 0.08]))
    steps = _drive_to(env, steps[-1][1], red)
    terminated, info = steps[-1]
    assert terminated and info["success"] is True
    assert info["reached"] == "green" and info["wrong_cube_reached"] is True
    # A new episode starts unlatched.
    _obs, info = env.reset(seed=0, options={"cubes": ARM_CUBES, "target": "red"})
    assert info["reached"] == "" and info["wrong_cube_reached"] is False
    env.close()


def test_unknown_names_list_what_exists() -> None:
    with pytest.raises(UnknownNameError, match="arm_reach.*reach_around"):
        sim.make("mujoco:reach_arround")
    env = sim.make("mujoco:reach_around")
    with pytest.raises(UnknownNameError, match="block_left"):
        env.reset(options={"scene": "blocked"})
    with pytest.raises(ConfigError, match="unknown reach_around reset options"):
        env.reset(options={"sceen": "block_left"})
    with pytest.raises(UnknownNameError, match="left"):
        env.unwrapped.expert(route="up")
    with pytest.raises(ConfigError, match="speed"):
        env.unwrapped.expert(speed=3.0)
    with pytest.raises(UnknownNameError, match="colours"):
        sim.make("mujoco:arm_reach", target="purple")
    arm = sim.make("mujoco:arm_reach", camera=False)
    with pytest.raises(ConfigError, match="within reach"):
        arm.reset(options={"cubes": {"red": (2.0, 0.0)}})
    arm.reset(seed=0, options={"cubes": {"red": (0.3, 0.1)}, "target": "red"})
    assert arm.unwrapped.task.target_point()[:2] == pytest.approx([0.3, 0.1])
    with pytest.raises(ConfigError, match="camera"):
        sim.make("mujoco:arm_reach", camera="side")
    with pytest.raises(ConfigError, match="image_size"):
        sim.make("mujoco:arm_reach", image_size=0)


class _BadPolicy(Policy):
    def __init__(self, action: np.ndarray) -> None:
        super().__init__()
        self.action = action
        self.action_dim = 2

    def predict_action_chunk(self, obs: dict) -> np.ndarray:
        return self.action[None, :]


def test_bad_actions_raise_action_error_naming_the_dims() -> None:
    env = sim.make("mujoco:reach_around")
    with pytest.raises(ActionError, match="vy"):
        rollout(env, _BadPolicy(np.array([0.1, np.nan])), seed=0)
    env.reset(seed=0)
    with pytest.raises(ActionError, match="shape"):
        env.step(np.zeros(3))
    with pytest.raises(ActionError, match="vx"):
        env.step(np.array([np.inf, 0.0]))
    with pytest.raises(ActionError, match="numeric"):
        env.step(["fast", "left"])
    # out-of-bound but finite actions are clipped to the bounds (m/s)
    env.step(np.array([5.0, 0.0]))
    assert env.data.ctrl[0] == pytest.approx(0.5)


def test_missing_gl_raises_render_error_naming_the_fix() -> None:
    code = (
        "import sim\n"
        "from embodied.errors import RenderError\n"
        "env = sim.make('mujoco:reach_around', camera=True)\n"
        "try:\n"
        "    env.reset(seed=0)\n"
        "except RenderError as e:\n"
        "    print('RENDER_ERROR', e)\n"
    )
    envvars = {**os.environ, "MUJOCO_GL": "glfw", "PYOPENGL_PLATFORM": "glfw", "DISPLAY": ""}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=envvars, timeout=120
    )
    assert "RENDER_ERROR" in out.stdout, out.stderr[-2000:]
    assert "MUJOCO_GL=egl" in out.stdout and "libegl1" in out.stdout
    assert issubclass(RenderError, RuntimeError)


def test_registered_in_env_registry() -> None:
    ids = sim.list_env_ids()
    assert "mujoco:reach_around" in ids and "mujoco:arm_reach" in ids
    with pytest.raises(UnknownNameError):
        sim.make("mujoco")


def test_projected_cube_centres_land_on_their_colour() -> None:
    env = sim.make("mujoco:arm_reach", camera=True)
    try:
        for seed in (0, 7):
            obs, _ = env.reset(seed=seed)
            frame = obs["image.front"]
            task = env.unwrapped.task
            uv, depth = env.unwrapped.project(task.cube_pos, "front")
            assert (depth > 0).all()
            for colour, (u, v) in zip(("red", "green", "blue", "yellow"), uv, strict=True):
                r, g, b = (int(c) for c in frame[int(v), int(u)])
                dominant = {
                    "red": r > g + 60 and r > b + 60,
                    "green": g > r + 60 and g > b + 60,
                    "blue": b > r + 60 and b > g + 60,
                    "yellow": r > b + 60 and g > b + 60,
                }
                assert dominant[colour], (seed, colour, (r, g, b), (u, v))  # fmt: skip
        # a point behind the camera has negative depth
        unwrapped = env.unwrapped
        cam = unwrapped.data.cam_xpos[unwrapped.model.camera("front").id]
        _, behind = unwrapped.project(np.array([cam + 10 * (cam - task.cube_pos[0])]), "front")
        assert behind[0] < 0
    finally:
        env.close()
