"""Real LIBERO through the env contract: one task per suite, cameras, protocol, bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.libero, pytest.mark.usefixtures("libero_assets")]

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from libero_goals import force_goal  # noqa: E402

import sim  # noqa: E402
from embodied.contracts import Policy  # noqa: E402
from embodied.errors import ActionError, CompatibilityError, ConfigError, UnknownNameError  # noqa: E402
from embodied.loop import rollout  # noqa: E402
from embodied.specs import Observation  # noqa: E402


def test_every_suite_lists_its_tasks() -> None:
    from libero.libero import benchmark

    from sim.libero import SUITES, suite_tasks

    counts = {s: len(suite_tasks(s)) for s in SUITES}
    assert counts == {
        "libero_spatial": 10,
        "libero_object": 10,
        "libero_goal": 10,
        "libero_10": 10,
        "libero_90": 90,
    }
    for suite in SUITES:  # same order and language as LIBERO's benchmark objects
        bench = benchmark.get_benchmark_dict()[suite]()
        assert [t.name for t in suite_tasks(suite)] == bench.get_task_names()
        assert [t.language for t in suite_tasks(suite)] == [
            bench.get_task(i).language for i in range(bench.n_tasks)
        ]
    ids = sim.list_env_ids()
    assert "libero:libero_90:89" in ids and "libero:libero_spatial" in ids
    assert ids["libero:libero_goal:0"] == "open the middle drawer of the cabinet"


def test_unknown_suite_and_task_list_what_exists() -> None:
    with pytest.raises(UnknownNameError) as info:
        sim.make("libero:libero_11:0")
    assert "libero_spatial" in str(info.value) and "libero_90" in str(info.value)
    with pytest.raises(UnknownNameError) as info:
        sim.make("libero:libero_goal:12")
    msg = str(info.value)
    assert "'12'" in msg and "0: open_the_middle_drawer_of_the_cabinet" in msg and "0-9" in msg
    with pytest.raises(UnknownNameError, match="'fly_to_the_moon'"):
        sim.make("libero:libero_object:fly_to_the_moon")
    with pytest.raises(ConfigError, match="'thermal'"):
        sim.make("libero:libero_spatial:0", cameras=("thermal",))
    with pytest.raises(ConfigError, match="'camera'") as info:
        sim.make("libero:libero_spatial:0", camera=True)
    assert "cameras" in str(info.value) and "protocol" in str(info.value)


@pytest.mark.parametrize(
    "task",
    ["libero_spatial:0", "libero_object:0", "libero_goal:0", "libero_10:0", "libero_90:0"],
)
def test_suite_task_resets_steps_renders_and_detects_success(task: str) -> None:
    env = sim.make(f"libero:{task}", cameras=())
    try:
        suite = task.split(":")[0]
        assert env.env_id == f"libero:{task}"
        assert (
            env.max_episode_steps
            == {
                "libero_spatial": 220,
                "libero_object": 280,
                "libero_goal": 300,
                "libero_10": 520,
                "libero_90": 400,
            }[suite]
        )
        d = env.describe()
        assert d["protocol"]["num_wait_steps"] == 10 and d["action"]["names"][-1] == "gripper"
        inner = env.raw_env.env

        obs_a, info = env.reset(options={"init_state": 1})
        qpos_a = inner.sim.data.qpos.copy()
        assert info["init_state"] == 1 and not info["success"]
        env.observation_spec.validate(obs_a)
        assert obs_a["instruction"] == env.instruction != ""
        env.reset(options={"init_state": 2})
        assert not np.allclose(inner.sim.data.qpos, qpos_a)  # another fixed init state
        obs_b, _ = env.reset(options={"init_state": 1})
        np.testing.assert_allclose(inner.sim.data.qpos, qpos_a, atol=1e-9)  # same state again
        np.testing.assert_allclose(obs_b["state"], obs_a["state"], atol=1e-6)

        action = np.array([0.5, 0.0, 0.5, 0.0, 0.0, 0.0, -1.0])
        for _ in range(4):
            obs, reward, terminated, truncated, info = env.step(action)
        assert not (terminated or truncated or info["success"]) and reward == 0.0
        assert obs["state"][2] > obs_a["state"][2] + 0.005  # moved up (z, m)
        assert info["ee_vel"][2] > 0 and np.allclose(info["ee_pos"], obs["state"][:3])
        frame = env.render()
        assert frame.shape == (256, 256, 3) and frame.dtype == np.uint8 and frame.std() > 10

        assert force_goal(inner)
        for _ in range(5):
            obs, reward, terminated, _, info = env.step(np.array([0, 0, 0, 0, 0, 0, -1.0]))
            if info["success"]:
                break
        assert info["success"] and terminated and reward == 1.0
        with pytest.raises(ConfigError, match="50 fixed init states"):
            env.reset(options={"init_state": 50})
        with pytest.raises(ConfigError, match="'scene'"):
            env.reset(options={"scene": "x"})
        with pytest.raises(ActionError, match=r"\(3,\)"):
            env.step(np.zeros(3))
    finally:
        env.close()


class CloseDrawer(Policy):
    """Scripted pusher for libero_90:0 (close the top drawer) using the drawer's position."""

    action_dim = 7

    def __init__(self, region_pos: np.ndarray) -> None:
        super().__init__()
        r = np.asarray(region_pos)
        offsets = np.array([[0, 0.22, 0.10], [0, 0.22, 0.01], [0, -0.10, 0.01]])
        self.waypoints = list(r + offsets)  # above, in front of, then through the drawer
        self.k = 0

    def reset(self) -> None:
        super().reset()
        self.k = 0

    def predict_action_chunk(self, obs: Observation) -> np.ndarray:
        ee = obs["state"][:3]
        if self.k < 2 and np.linalg.norm(self.waypoints[self.k] - ee) < 0.015:
            self.k += 1
        a = np.zeros(7)
        a[:3] = np.clip(12.0 * (self.waypoints[self.k] - ee), -1.0, 1.0)
        a[6] = 1.0  # closed fist
        return a[None]


def test_scripted_policy_closes_the_drawer_through_rollout() -> None:
    env = sim.make("libero:libero_90:0", cameras=())
    try:
        env.reset(options={"init_state": 0})
        region = env.raw_env.env.object_states_dict["wooden_cabinet_1_top_region"]
        policy = CloseDrawer(region.get_geom_state()["pos"].copy())
        ep = rollout(env, policy, reset_options={"init_state": 0}, max_steps=120)
        assert ep.success and 20 < ep.success_step < 120, ep.meta
        assert ep.meta["reason"] == "success"
    finally:
        env.close()


class FixedPolicy(Policy):
    """Zero actions with a configurable action dim / image expectation / conventions."""

    def __init__(
        self,
        action_dim: int,
        image_size: tuple[int, int] | None = None,
        orientation: str | None = None,
        gripper: str | None = None,
    ) -> None:
        super().__init__()
        self.action_dim = action_dim
        self.image_keys = ("image.agentview",)
        self.image_size = image_size
        self.image_orientation = orientation
        self.gripper_convention = gripper

    def predict_action_chunk(self, obs: Observation) -> np.ndarray:
        return np.zeros((1, self.action_dim))


def test_cameras_raw_frames_native_gripper_and_mismatches() -> None:
    env = sim.make("libero:libero_spatial:0", cameras=("agentview", "eye_in_hand"))
    try:
        spec = env.observation_spec.cameras
        assert (spec["agentview"].height, spec["agentview"].orientation) == (256, "vertical_flip")
        assert env.gripper_convention == "close_positive" and env.action_spec.low[-1] == -1.0
        d = env.describe()
        assert d["gripper_convention"] == "close_positive"
        assert d["observation"]["orientation"]["eye_in_hand"] == "vertical_flip"
        obs, _ = env.reset(options={"init_state": 0})
        env.observation_spec.validate(obs)
        # LIBERO's pixels as is (tests/libero/test_libero_reference.py: equal to LIBERO's own
        # env at every step); render() is the same frame upright, for videos.
        frame = obs["image.agentview"]
        assert frame.shape == (256, 256, 3) and frame.dtype == np.uint8 and frame.std() > 10
        np.testing.assert_array_equal(env.render(), frame[::-1])
        assert obs["image.eye_in_hand"].shape == (256, 256, 3)

        # LIBERO's own gripper convention through real physics: +1 closes, -1 opens.
        for _ in range(8):
            obs, *_ = env.step(np.array([0, 0, 0, 0, 0, 0, 1.0]))
        closed = obs["state"][6] - obs["state"][7]
        for _ in range(8):
            obs, *_ = env.step(np.array([0, 0, 0, 0, 0, 0, -1.0]))
        opened = obs["state"][6] - obs["state"][7]
        assert opened > closed + 0.02, (opened, closed)

        steps = []
        orig = env.step
        env.step = lambda a: steps.append(a) or orig(a)  # type: ignore[method-assign]
        with pytest.raises(CompatibilityError, match="256x256") as info:
            rollout(env, FixedPolicy(7, image_size=(224, 224)))
        assert "224x224" in str(info.value)
        with pytest.raises(CompatibilityError, match="2-dim actions") as info:
            rollout(env, FixedPolicy(2))
        assert "takes 7" in str(info.value)
        with pytest.raises(CompatibilityError, match="delivers them 'vertical_flip'"):
            rollout(env, FixedPolicy(7, orientation="upright"))
        with pytest.raises(CompatibilityError, match="takes 'close_positive'"):
            rollout(env, FixedPolicy(7, gripper="open_positive"))
        assert steps == []  # refused before the first step
        ep = rollout(
            env,
            FixedPolicy(7, orientation="vertical_flip", gripper="close_positive"),
            max_steps=2,
        )
        assert len(ep) == 2 and len(steps) == 2
    finally:
        env.close()


def _run(code: str, env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_config_written_without_stdin_and_missing_assets_error(tmp_path: Path) -> None:
    cfg_dir = tmp_path / "libero_cfg"
    base = {k: v for k, v in os.environ.items() if k != "EMBODIED_LIBERO_ASSETS"}
    env = {**base, "LIBERO_CONFIG_PATH": str(cfg_dir), "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    code = (
        "import sim\n"
        "assert 'libero:libero_10:9' in sim.list_env_ids(), sim.ENVS.unavailable()\n"
        "try:\n    sim.make('libero:libero_spatial:0')\n"
        "except Exception as e:\n    print('ERR', type(e).__name__, e)\n"
    )
    proc = _run(code, env, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    import yaml

    cfg = yaml.safe_load((cfg_dir / "config.yaml").read_text())
    assert Path(cfg["bddl_files"], "libero_spatial").is_dir()
    err = proc.stdout.split("ERR", 1)[1]
    assert "ConfigError" in err and "--libero-assets" in err
    assert "EMBODIED_LIBERO_ASSETS" in err and "Hugging Face hub" in err

    (cfg_dir / "config.yaml").write_text((cfg_dir / "config.yaml").read_text() + "# user edit\n")
    proc = _run("from sim.libero import ensure_config; ensure_config()", env, tmp_path)
    assert proc.returncode == 0 and "# user edit" in (cfg_dir / "config.yaml").read_text()


def test_bad_assets_folder_and_safe_init_states(tmp_path: Path) -> None:
    import torch

    from sim.libero import resolve_task
    from sim.libero.resources import load_init_states, resolve_assets

    with pytest.raises(ConfigError) as info:
        resolve_assets(tmp_path)
    assert str(tmp_path) in str(info.value) and "EMBODIED_LIBERO_ASSETS" in str(info.value)

    states = load_init_states(resolve_task("libero_goal:3").init_states_file())
    assert states.shape[0] == 50 and states.dtype == np.float64

    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (os.system, (f"touch {marker}",))

    bad = tmp_path / "evil.pruned_init"
    torch.save(Evil(), bad)
    with pytest.raises(ConfigError, match="safely"):
        load_init_states(bad)
    assert not marker.exists()
