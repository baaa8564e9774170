"""Datasets on disk: round trip, robomimic layout, atomic writes, damaged files."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
from core_plant import FirstOrderEnv, GainPolicy, PController, VelocityConcept

from embodied.datasets import Dataset, DatasetWriter, export_robomimic
from embodied.errors import DatasetError
from embodied.io import atomic_path, write_json
from embodied.loop import Steering, rollout


def _episodes(n: int):
    out = []
    for i in range(n):
        steer = Steering(VelocityConcept(), PController(1.0 + i), knob="alpha", setpoint=0.5)
        out.append(rollout(FirstOrderEnv(goal=1e9), GainPolicy(), steering=steer, max_steps=5 + i))
    return out


def test_round_trip_keeps_every_array_and_attribute(tmp_path: Path) -> None:
    eps = _episodes(3)
    writer = DatasetWriter(tmp_path / "ds", env_args={"env_id": "test:first_order"})
    for ep in eps:
        writer.add(ep)
    ds = Dataset(tmp_path / "ds")
    assert len(ds) == 3 and ds.env_args == {"env_id": "test:first_order"}
    for ep, back in zip(eps, ds, strict=False):
        np.testing.assert_array_equal(back.actions, ep.actions)
        np.testing.assert_array_equal(back.obs["state"], ep.observations["state"])
        np.testing.assert_array_equal(back.extras["knobs/alpha"], ep.knobs["alpha"])
        np.testing.assert_array_equal(back.extras["measurements"], ep.measurements)
        assert back.dones[-1] == 1 and back.dones[:-1].sum() == 0
        assert (
            back.instruction == ep.instruction
            and back.attrs["meta"]["env_id"] == "test:first_order"
        )


def test_robomimic_layout_and_export(tmp_path: Path) -> None:
    writer = DatasetWriter(tmp_path / "ds")
    for ep in _episodes(2):
        writer.add(ep)
    out = export_robomimic(tmp_path / "ds", tmp_path / "all.hdf5")
    with h5py.File(out, "r") as f:
        assert sorted(f["data"].keys()) == ["demo_0", "demo_1"]
        demo = f["data/demo_1"]
        assert {"obs", "actions", "rewards", "dones"} <= set(demo.keys())
        assert demo.attrs["num_samples"] == demo["actions"].shape[0] == 6
        assert f["data"].attrs["total"] == 5 + 6
    assert len(Dataset(out)) == 2


def test_writer_resumes_numbering(tmp_path: Path) -> None:
    DatasetWriter(tmp_path).add(_episodes(1)[0])
    w2 = DatasetWriter(tmp_path)
    path = w2.add(_episodes(1)[0])
    assert path.name == "episode_000001.hdf5" and len(Dataset(tmp_path)) == 2


def test_crash_mid_write_keeps_previous_file(tmp_path: Path) -> None:
    target = tmp_path / "meta.json"
    write_json(target, {"v": 1})
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text('{"v": 2, "half')
        raise RuntimeError("killed mid-write")
    assert target.read_text().strip().endswith("}") and '"v": 1' in target.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["meta.json"]


def test_partial_shard_is_ignored_and_damaged_shard_named(tmp_path: Path) -> None:
    w = DatasetWriter(tmp_path)
    w.add(_episodes(1)[0])
    (tmp_path / ".episode_000001.hdf5.abc.tmp").write_bytes(b"\x89HDF half written")
    assert len(Dataset(tmp_path)) == 1
    (tmp_path / "episode_000001.hdf5").write_bytes(b"not hdf5 at all")
    with pytest.raises(DatasetError, match="episode_000001.hdf5"):
        Dataset(tmp_path)


def test_missing_and_empty_datasets(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="does not exist"):
        Dataset(tmp_path / "nope")
    with pytest.raises(DatasetError, match="no episode_"):
        Dataset(tmp_path)
    bad = tmp_path / "x.hdf5"
    with h5py.File(bad, "w") as f:
        f.create_group("other")
    with pytest.raises(DatasetError, match="no 'data' group"):
        Dataset(bad)
