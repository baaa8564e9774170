"""Datasets on disk: round trip, robomimic layout, atomic writes, damaged files."""

from __future__ import annotations

import json
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
        group = f["data/demo_1"]
        assert {"obs", "actions", "rewards", "dones"} <= set(group.keys())
        assert group.attrs["num_samples"] == group["actions"].shape[0] == 6
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


def _digests(root: Path) -> dict[str, str]:
    import hashlib

    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in root.glob("episode_*")}


def test_writer_numbers_after_the_highest_shard_when_one_is_missing(tmp_path: Path) -> None:
    w = DatasetWriter(tmp_path, env_args={"env_id": "test:first_order"})
    for ep in _episodes(5):
        w.add(ep)
    (tmp_path / "episode_000002.hdf5").unlink()  # what the damaged-shard error advises
    before = _digests(tmp_path)
    resumed = DatasetWriter(tmp_path, env_args={"env_id": "test:first_order"})
    paths = [resumed.add(ep) for ep in _episodes(2)]
    assert [p.name for p in paths] == ["episode_000005.hdf5", "episode_000006.hdf5"]
    after = _digests(tmp_path)
    assert {k: after[k] for k in before} == before  # no existing shard changed
    assert len(Dataset(tmp_path)) == 6


def test_writer_never_replaces_an_existing_shard(tmp_path: Path) -> None:
    first = DatasetWriter(tmp_path)
    second = DatasetWriter(tmp_path)  # two writers on one folder both plan shard 0
    first.add(_episodes(1)[0])
    before = _digests(tmp_path)
    with pytest.raises(DatasetError, match=r"episode_000000\.hdf5.*exists.*fix:"):
        second.add(_episodes(2)[1])
    assert _digests(tmp_path) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_writer_without_env_args_keeps_the_metadata(tmp_path: Path) -> None:
    env_args = {"env_id": "test:first_order", "control_rate_hz": 20}
    DatasetWriter(tmp_path, env_args=env_args).add(_episodes(1)[0])
    meta_before = (tmp_path / "meta.json").read_text()
    resumed = DatasetWriter(tmp_path)  # e.g. a script appending episodes
    resumed.add(_episodes(1)[0])
    assert (tmp_path / "meta.json").read_text() == meta_before
    assert resumed.env_args == env_args
    assert Dataset(tmp_path / "episode_000001.hdf5").env_args == env_args


def test_writer_refuses_a_damaged_meta_json(tmp_path: Path) -> None:
    (tmp_path / "meta.json").write_text('{"format": "robomimic-shards", "env_args": ')
    with pytest.raises(DatasetError, match=r"meta\.json.*fix:"):
        DatasetWriter(tmp_path)


def _write_robomimic_file(path: Path, obs_len: int, n_actions: int = 6) -> None:
    with h5py.File(path, "w") as f:
        data = f.create_group("data")
        data.attrs["env_args"] = "{}"
        group = data.create_group("demo_0")
        group.create_dataset("obs/state", data=np.zeros((obs_len, 2)))
        group.create_dataset("actions", data=np.zeros((n_actions, 1)))


@pytest.mark.parametrize("obs_len", [5, 7])
def test_observations_of_another_length_than_actions_are_refused(
    tmp_path: Path, obs_len: int
) -> None:
    path = tmp_path / "bad.hdf5"
    _write_robomimic_file(path, obs_len)
    ds = Dataset(path)
    with pytest.raises(DatasetError) as info:
        ds[0]
    msg = str(info.value)
    assert str(path) in msg and "obs/state" in msg and f"{obs_len}" in msg and "6" in msg
    assert "fix:" in msg
    _write_robomimic_file(tmp_path / "good.hdf5", 6)
    assert len(Dataset(tmp_path / "good.hdf5")[0]) == 6


@pytest.mark.parametrize("where", ["env_args", "meta"])
def test_bad_json_attributes_name_the_file_and_the_key(tmp_path: Path, where: str) -> None:
    DatasetWriter(tmp_path).add(_episodes(1)[0])
    shard = tmp_path / "episode_000000.hdf5"
    with h5py.File(shard, "a") as f:
        attrs = f["data"].attrs if where == "env_args" else f["data/demo_0"].attrs
        attrs[where] = '{"env_id": "test", '
    with pytest.raises(DatasetError) as info:
        Dataset(tmp_path)[0]
    msg = str(info.value)
    assert str(shard) in msg and where in msg and "fix:" in msg


def test_collect_cli_after_deleting_a_middle_shard_changes_no_existing_shard(
    tmp_path: Path,
) -> None:
    import subprocess
    import sys

    out = tmp_path / "demonstrations"

    def collect(n: int) -> None:
        args = ["collect", "--env", "mujoco:reach_around", "--episodes", str(n), "--no-camera"]
        proc = subprocess.run(
            [sys.executable, "-m", "embodied", *args, "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]

    collect(5)
    (out / "episode_000002.hdf5").unlink()
    before = _digests(out)
    assert len(before) == 4
    collect(6)  # the same collection, now of 6: it tops itself up with 2 new shards
    after = _digests(out)
    assert {k: after[k] for k in before} == before
    assert sorted(after) == sorted(before) + [f"episode_{i:06d}.hdf5" for i in range(5, 7)]
    assert len(Dataset(out)) == 6


def test_dataset_errors_are_reported_once(tmp_path: Path) -> None:
    bad = tmp_path / "x.hdf5"
    with h5py.File(bad, "w") as f:
        f.create_group("other")
    with pytest.raises(DatasetError) as info:
        Dataset(bad)
    assert str(info.value).count("fix:") == 1 and "cannot read" not in str(info.value)


def test_writer_without_env_args_or_meta_json_keeps_the_shards_env_args(tmp_path: Path) -> None:
    env_args = {"env_id": "test:first_order"}
    DatasetWriter(tmp_path, env_args=env_args).add(_episodes(1)[0])
    (tmp_path / "meta.json").unlink()
    resumed = DatasetWriter(tmp_path)
    resumed.add(_episodes(1)[0])
    assert resumed.env_args == env_args
    assert json.loads((tmp_path / "meta.json").read_text())["env_args"] == env_args
    assert Dataset(tmp_path / "episode_000001.hdf5").env_args == env_args
