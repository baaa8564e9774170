"""LeRobotDataset v3: export ours, read it back, read what lerobot itself writes, the CLI.

The layout assertions name what lerobot writes, verified in huggingface/lerobot:
``src/lerobot/datasets/utils.py`` (path templates, ``DEFAULT_CHUNK_SIZE``/file sizes),
``feature_utils.py::create_empty_dataset_info`` (info.json keys and their order),
``dataset_metadata.py::save_episode``/``save_episode_tasks`` (episode rows, tasks table),
``dataset_writer.py::_save_episode_data``/``_save_episode_video`` (data/video locations),
``video_utils.py::get_video_info`` (a video feature's ``info``), ``compute_stats.py``
(min/max/mean/std/count/q01..q99, image stats per channel in [0, 1] with shape (3, 1, 1)), and
``utils/constants.py::DEFAULT_FEATURES``. ``fixtures/lerobot_v3_tiny`` was written by lerobot
0.4.4's own ``LeRobotDataset`` (``fixtures/make_lerobot_v3_fixture.py``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from embodied.datasets import (
    Dataset,
    DatasetWriter,
    EpisodeData,
    LeRobotDataset,
    export_lerobot,
    open_dataset,
)
from embodied.datasets.lerobot import reader as lerobot_reader
from embodied.datasets.lerobot import video as lerobot_video
from embodied.errors import ConfigError, DatasetError

FIXTURES = Path(__file__).resolve().parent / "fixtures"
LEROBOT_FIXTURE = FIXTURES / "lerobot_v3_tiny"
STATS_FIXTURE = FIXTURES / "lerobot_stats_0.4.4.json"
"""Four episodes and the stats lerobot 0.4.4 computed for them (its header names how)."""
ROOT = Path(__file__).resolve().parents[2]
COLOURS = [(220, 30, 30), (30, 200, 40), (40, 60, 220)]
# Measured with the default h264/yuv420p/crf 23 on these frames (libx264 of PyAV 18): mean abs
# error 1.2-1.5, worst frame's mean 1.7, worst pixel 9; on rendered 84x84 MuJoCo arm_reach
# frames mean 2.4, worst pixel ~160 (chroma at thin coloured edges, from yuv420p subsampling).
MAX_MEAN_ERROR = 2.5
MAX_FRAME_MEAN_ERROR = 3.0
MAX_PIXEL_ERROR = 32


def _frames(episode: int, n: int, height: int = 32, width: int = 48) -> np.ndarray:
    """``(n, H, W, 3)`` frames: the episode's colour, a smooth gradient, brighter each step."""
    ys, xs = np.mgrid[0:height, 0:width]
    gradient = (ys * 40 // height + xs * 40 // width)[None, :, :, None]
    base = np.asarray(COLOURS[episode % len(COLOURS)], np.int32)[None, None, None, :]
    ramp = (np.arange(n) * 3)[:, None, None, None]
    return np.clip(base - 20 + gradient + ramp, 0, 255).astype(np.uint8)


def _episode(i: int, n: int, *, image: bool = True, state_dim: int = 4) -> EpisodeData:
    rng = np.random.default_rng(i)
    obs: dict[str, np.ndarray] = {"state": rng.normal(size=(n, state_dim)).astype(np.float32)}
    if image:
        obs["image.front"] = _frames(i, n)
    dones = np.zeros(n, np.uint8)
    dones[-1] = 1
    return EpisodeData(
        obs=obs,
        actions=rng.uniform(-1, 1, size=(n, 2)),
        rewards=np.linspace(0, 1, n),
        dones=dones,
        attrs={
            "instruction": f"reach target {i % 2}",
            "success": bool(i % 2 == 0),
            "success_step": n - 1,
            "meta": {"env_id": "test:toy", "seed": i, "control_rate_hz": 20.0},
        },
        extras={"measurements": rng.normal(size=n)},
        source=f"synthetic::{i}",
    )


def _episodes(lengths: tuple[int, ...] = (12, 7, 15), **kw: Any) -> list[EpisodeData]:
    return [_episode(i, n, **kw) for i, n in enumerate(lengths)]


def _image_errors(a: np.ndarray, b: np.ndarray) -> tuple[float, float, int]:
    diff = np.abs(a.astype(np.int32) - b.astype(np.int32))
    return float(diff.mean()), float(diff.mean(axis=(1, 2, 3)).max()), int(diff.max())


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[EpisodeData], Path]:
    episodes = _episodes()
    out = tmp_path_factory.mktemp("lerobot") / "ds"
    export_lerobot(episodes, out, robot_type="toy_arm", env_args={"env_id": "test:toy"})
    return episodes, out


def _load_fixture_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "make_lerobot_v3_fixture", FIXTURES / "make_lerobot_v3_fixture.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---- round trip ----------------------------------------------------------------------------


def test_round_trip_is_exact_but_for_video(exported: tuple[list[EpisodeData], Path]) -> None:
    episodes, out = exported
    ds = LeRobotDataset(out)
    assert len(ds) == len(episodes) and ds.fps == 20
    assert ds.env_args == {"env_id": "test:toy"}
    for ep, back in zip(episodes, ds, strict=True):
        assert back.obs["state"].dtype == np.float32 and back.actions.dtype == np.float64
        np.testing.assert_array_equal(back.obs["state"], ep.obs["state"])
        np.testing.assert_array_equal(back.actions, ep.actions)
        np.testing.assert_array_equal(back.rewards, ep.rewards)
        np.testing.assert_array_equal(back.dones, ep.dones)
        assert back.instruction == ep.instruction
        assert back.attrs == ep.attrs
        assert back.extras.keys() == ep.extras.keys()
        np.testing.assert_array_equal(back.extras["measurements"], ep.extras["measurements"])
        frames = back.obs["image.front"]
        assert frames.shape == ep.obs["image.front"].shape and frames.dtype == np.uint8
        mean, worst_frame, worst_pixel = _image_errors(frames, ep.obs["image.front"])
        assert mean < MAX_MEAN_ERROR, mean
        assert worst_frame < MAX_FRAME_MEAN_ERROR, worst_frame
        assert worst_pixel < MAX_PIXEL_ERROR, worst_pixel


def test_episodes_concatenate_into_one_video_and_data_file(
    exported: tuple[list[EpisodeData], Path],
) -> None:
    episodes, out = exported
    assert [p.relative_to(out).as_posix() for p in sorted(out.glob("videos/*/*/*.mp4"))] == [
        "videos/observation.images.front/chunk-000/file-000.mp4"
    ]
    assert [p.relative_to(out).as_posix() for p in sorted(out.glob("data/*/*.parquet"))] == [
        "data/chunk-000/file-000.parquet"
    ]
    rows = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    start, first_index = 0.0, 0
    for ep, row in zip(episodes, rows, strict=True):
        n = len(ep)
        assert row["videos/observation.images.front/from_timestamp"] == pytest.approx(start)
        assert row["videos/observation.images.front/to_timestamp"] == pytest.approx(start + n / 20)
        assert (row["dataset_from_index"], row["dataset_to_index"]) == (
            first_index,
            first_index + n,
        )
        start, first_index = start + n / 20, first_index + n
    ds = LeRobotDataset(out)
    for i in (2, 0, 1):  # any order: each episode finds its own frames in the shared file
        frames = ds[i].obs["image.front"].astype(np.int32)
        expected = _frames(i, len(episodes[i])).astype(np.int32)
        # each frame has its own episode's colour, and the per-step ramp is in order
        colour_error = np.abs(frames.mean(axis=(1, 2)) - expected.mean(axis=(1, 2))).max()
        assert colour_error < 3, (i, colour_error)
        assert (np.diff(frames.mean(axis=(1, 2, 3))) > 1).all()


def test_data_files_roll_over_by_size_and_chunk(tmp_path: Path) -> None:
    # 1500 frames x 128 float32 ~ 0.75 MiB per episode: the third starts a new file, which
    # with chunks_size=1 is the next chunk
    episodes = [_episode(i, 1500, image=False, state_dim=128) for i in range(3)]
    export_lerobot(episodes, tmp_path / "ds", data_files_size_in_mb=1, chunks_size=1)
    rows = pq.read_table(tmp_path / "ds/meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert [(r["data/chunk_index"], r["data/file_index"]) for r in rows] == [(0, 0), (0, 0), (1, 0)]
    ds = LeRobotDataset(tmp_path / "ds")
    for ep, back in zip(episodes, ds, strict=True):
        np.testing.assert_array_equal(back.obs["state"], ep.obs["state"])


# ---- layout --------------------------------------------------------------------------------


def test_info_json_layout(exported: tuple[list[EpisodeData], Path]) -> None:
    episodes, out = exported
    info = json.loads((out / "meta/info.json").read_text())
    # feature_utils.py::create_empty_dataset_info (key order of lerobot's info.json)
    assert list(info) == [
        "codebase_version",
        "robot_type",
        "total_episodes",
        "total_frames",
        "total_tasks",
        "chunks_size",
        "data_files_size_in_mb",
        "video_files_size_in_mb",
        "fps",
        "splits",
        "data_path",
        "video_path",
        "features",
    ]
    assert info["codebase_version"] == "v3.0" and info["robot_type"] == "toy_arm"
    assert info["total_episodes"] == 3 and info["total_frames"] == sum(map(len, episodes))
    assert info["total_tasks"] == 2 and info["fps"] == 20
    assert info["splits"] == {"train": "0:3"}
    assert (info["chunks_size"], info["data_files_size_in_mb"]) == (1000, 100)
    assert info["video_files_size_in_mb"] == 200
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    assert (
        info["video_path"] == "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    )
    features = info["features"]
    assert list(features) == [
        "observation.state",
        "observation.images.front",
        "action",
        "next.reward",
        "next.done",
        "timestamp",
        "frame_index",
        "episode_index",
        "index",
        "task_index",
    ]
    assert features["observation.state"] == {"dtype": "float32", "shape": [4], "names": None}
    assert features["action"] == {"dtype": "float64", "shape": [2], "names": None}
    assert features["next.done"] == {"dtype": "bool", "shape": [1], "names": None}
    for key in ("timestamp", "frame_index", "episode_index", "index", "task_index"):
        dtype = "float32" if key == "timestamp" else "int64"
        assert features[key] == {"dtype": dtype, "shape": [1], "names": None}
    video = features["observation.images.front"]
    assert video["dtype"] == "video" and video["shape"] == [32, 48, 3]
    assert video["names"] == ["height", "width", "channels"]
    # video_utils.py::get_video_info (lerobot 0.4.x keys; the fixture written by lerobot agrees)
    assert video["info"] == {
        "video.height": 32,
        "video.width": 48,
        "video.codec": "h264",
        "video.pix_fmt": "yuv420p",
        "video.is_depth_map": False,
        "video.fps": 20,
        "video.channels": 3,
        "has_audio": False,
    }


def test_tables_layout(exported: tuple[list[EpisodeData], Path]) -> None:
    episodes, out = exported
    data = pq.read_table(out / "data/chunk-000/file-000.parquet")
    assert data.column_names == [
        "observation.state",
        "action",
        "next.reward",
        "next.done",
        "timestamp",
        "frame_index",
        "episode_index",
        "index",
        "task_index",
    ]
    assert str(data.schema.field("observation.state").type) == "fixed_size_list<element: float>[4]"
    assert str(data.schema.field("timestamp").type) == "float"
    assert data.column("index").to_pylist() == list(range(sum(map(len, episodes))))
    np.testing.assert_allclose(
        data.column("timestamp").to_numpy()[:12], np.arange(12) / 20, rtol=0, atol=1e-6
    )

    # dataset_metadata.py::save_episode_tasks: a DataFrame indexed by the task string
    tasks = pq.read_table(out / "meta/tasks.parquet")
    pandas_meta = json.loads(tasks.schema.metadata[b"pandas"])
    assert pandas_meta["index_columns"] == ["task"]
    assert tasks.column("task").to_pylist() == ["reach target 0", "reach target 1"]
    assert tasks.column("task_index").to_pylist() == [0, 1]

    # dataset_metadata.py::save_episode + dataset_writer.py::_save_episode_data/_video
    table = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet")
    lerobot_columns = [c for c in table.column_names if not c.startswith("embodied/")]
    expected = ["episode_index", "tasks", "length", "data/chunk_index", "data/file_index"]
    expected += ["dataset_from_index", "dataset_to_index"]
    expected += [
        f"videos/observation.images.front/{k}"
        for k in ("chunk_index", "file_index", "from_timestamp", "to_timestamp")
    ]
    stats = ["min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99"]
    features = ["observation.state", "observation.images.front", "action", "next.reward"]
    features += ["next.done", "timestamp", "frame_index", "episode_index", "index", "task_index"]
    expected += [f"stats/{f}/{s}" for f in features for s in stats]
    expected += ["meta/episodes/chunk_index", "meta/episodes/file_index"]
    assert sorted(lerobot_columns) == sorted(expected)
    assert lerobot_columns[:7] == expected[:7]
    row = table.to_pylist()[1]
    assert row["tasks"] == ["reach target 1"] and row["length"] == 7
    assert np.asarray(row["stats/observation.images.front/mean"]).shape == (3, 1, 1)
    assert row["stats/observation.state/count"] == [7]
    assert json.loads(row["embodied/attrs"])["success"] is False


def test_layout_matches_a_dataset_lerobot_wrote(tmp_path: Path) -> None:
    """Same features as the lerobot fixture -> same tables, columns, types and info keys."""
    script = _load_fixture_script()
    episodes = []
    for ep in range(2):
        n = script.FRAMES
        episodes.append(
            EpisodeData(
                obs={
                    "state": np.zeros((n, 3), np.float32),
                    "image.front": np.stack([script.frame_image(ep, t) for t in range(n)]),
                },
                actions=np.zeros((n, 2), np.float32),
                rewards=np.zeros(n, np.float32),
                dones=np.eye(1, n, n - 1, dtype=np.uint8).ravel(),
                attrs={"instruction": script.TASKS[ep]},
            )
        )
    scheduling = (os.sched_getscheduler(0), os.sched_getparam(0))
    ours = export_lerobot(episodes, tmp_path / "ours", fps=script.FPS, codec="libsvtav1")
    # SVT-AV1 raises its caller to SCHED_FIFO 99 when run as root; children would inherit it.
    assert (os.sched_getscheduler(0), os.sched_getparam(0)) == scheduling
    theirs = LEROBOT_FIXTURE
    info_ours = json.loads((ours / "meta/info.json").read_text())
    info_theirs = json.loads((theirs / "meta/info.json").read_text())
    assert list(info_ours) == list(info_theirs)
    assert set(info_ours["features"]) == set(info_theirs["features"])
    for key, feature in info_theirs["features"].items():
        assert info_ours["features"][key]["dtype"] == feature["dtype"], key
        assert info_ours["features"][key]["shape"] == feature["shape"], key
        assert set(info_ours["features"][key].get("info", {})) == set(feature.get("info", {}))
    assert info_ours["features"]["observation.images.front"]["info"]["video.codec"] == "av1"
    for rel in ("data/chunk-000/file-000.parquet", "meta/episodes/chunk-000/file-000.parquet"):
        schema_ours = pq.read_schema(ours / rel)
        schema_theirs = pq.read_schema(theirs / rel)
        fields_ours = {f.name: str(f.type) for f in schema_ours if "embodied/" not in f.name}
        assert fields_ours == {f.name: str(f.type) for f in schema_theirs}, rel
    assert pq.read_schema(ours / "meta/tasks.parquet").names[0] == "task_index"
    stats_ours = json.loads((ours / "meta/stats.json").read_text())
    stats_theirs = json.loads((theirs / "meta/stats.json").read_text())
    assert set(stats_ours) == set(stats_theirs)
    for key, stats in stats_theirs.items():
        assert set(stats_ours[key]) == set(stats), key
        for stat, value in stats.items():
            assert np.shape(stats_ours[key][stat]) == np.shape(value), (key, stat)


def test_encoder_calls_keep_the_threads_scheduling_policy() -> None:
    """A policy an encoder sets on its calling thread is undone (run in a throwaway thread)."""
    seen: list[int] = []

    def work() -> None:
        before = os.sched_getscheduler(0)
        with lerobot_video._scheduling_kept():
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))  # what SVT-AV1 does
            seen.append(os.sched_getscheduler(0))
        seen.append(os.sched_getscheduler(0))
        seen.append(before)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert seen == [os.SCHED_BATCH, os.SCHED_OTHER, os.SCHED_OTHER]


def test_stats_match_numpy(exported: tuple[list[EpisodeData], Path]) -> None:
    episodes, out = exported
    stats = json.loads((out / "meta/stats.json").read_text())
    states = np.concatenate([ep.obs["state"] for ep in episodes]).astype(np.float64)
    s = stats["observation.state"]
    assert set(s) == {"min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99"}
    # a float32 column's per-episode moments are float32, as lerobot computes them
    np.testing.assert_allclose(s["mean"], states.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s["std"], states.std(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s["min"], states.min(0))
    np.testing.assert_allclose(s["max"], states.max(0))
    assert s["count"] == [len(states)]
    # quantiles: the count-weighted mean of the episodes' histogram estimates (lerobot 0.4.4;
    # exact values in test_stats_equal_what_lerobot_0_4_4_computes)
    assert (np.asarray(s["q01"]) <= np.asarray(s["q50"])).all()
    assert (np.asarray(s["q50"]) <= np.asarray(s["q99"])).all()
    actions = np.concatenate([ep.actions for ep in episodes])
    np.testing.assert_allclose(stats["action"]["mean"], actions.mean(0), rtol=1e-9)
    np.testing.assert_allclose(stats["action"]["std"], actions.std(0), rtol=1e-9)
    frames = np.concatenate([ep.obs["image.front"] for ep in episodes]).reshape(-1, 3) / 255.0
    image = stats["observation.images.front"]
    assert np.shape(image["mean"]) == (3, 1, 1)
    np.testing.assert_allclose(np.ravel(image["mean"]), frames.mean(0), rtol=1e-9)
    np.testing.assert_allclose(np.ravel(image["std"]), frames.std(0), rtol=1e-9)
    assert 0.0 <= np.min(image["min"]) <= np.max(image["max"]) <= 1.0
    assert image["count"] == [len(frames) // (32 * 48)]  # all frames sampled (short episodes)
    ep_rows = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    for ep, row in zip(episodes, ep_rows, strict=True):
        np.testing.assert_allclose(
            row["stats/observation.state/mean"],
            ep.obs["state"].astype(np.float64).mean(0),
            rtol=1e-5,
            atol=1e-6,
        )
        assert row["stats/next.done/max"] == [True] and row["stats/next.done/min"] == [False]


def _stats_fixture_episodes(fixture: dict[str, Any]) -> list[EpisodeData]:
    """The fixture's episodes as ours (lerobot's (T, 1) reward/done columns as (T,))."""
    return [
        EpisodeData(
            obs={
                "state": np.asarray(ep["observation.state"], np.float32),
                "image.front": np.asarray(ep["observation.images.front"], np.uint8),
            },
            actions=np.asarray(ep["action"], np.float64),
            rewards=np.asarray(ep["next.reward"], np.float32)[:, 0],
            dones=np.asarray(ep["next.done"], bool)[:, 0].astype(np.uint8),
            attrs={"instruction": ep["task"]},
        )
        for ep in fixture["episodes"]
    ]


def _assert_stats_equal(ours: dict[str, Any], theirs: dict[str, Any], where: str) -> None:
    """Every stat of every feature equal (to 1e-12), but the image std (see below)."""
    assert set(ours) == set(theirs), where
    for key, stats in theirs.items():
        assert set(ours[key]) == set(stats), (where, key)
        for stat, value in stats.items():
            if (key, stat) == ("observation.images.front", "std"):
                continue
            np.testing.assert_allclose(
                np.asarray(ours[key][stat], np.float64),
                np.asarray(value, np.float64),
                rtol=1e-12,
                atol=1e-12,
                err_msg=f"{where}: {key} {stat}",
            )


def test_stats_equal_what_lerobot_0_4_4_computes(tmp_path: Path) -> None:
    """meta/stats.json and the episodes' stats/* columns are lerobot 0.4.4's for the same data.

    The fixture holds lerobot's compute_episode_stats per episode, aggregate_stats over them,
    and the meta/stats.json lerobot's own writer made (it folds aggregate_stats episode by
    episode). Quantiles are the count-weighted mean of the episodes' quantiles there. The one
    deliberate difference is the image std, whose pixels lerobot 0.4.4 squares in uint8.
    """
    fixture = json.loads(STATS_FIXTURE.read_text())
    assert fixture["generator"].startswith("lerobot 0.4.4 ")
    episodes = _stats_fixture_episodes(fixture)
    out = export_lerobot(episodes, tmp_path / "ds", fps=fixture["fps"])
    ours = json.loads((out / "meta/stats.json").read_text())
    _assert_stats_equal(ours, fixture["stats_writer"], "meta/stats.json vs lerobot's writer")
    _assert_stats_equal(ours, fixture["stats_aggregate_stats"], "vs aggregate_stats")
    rows = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    for i, (row, theirs) in enumerate(zip(rows, fixture["per_episode"], strict=True)):
        mine = {
            key: {stat: row[f"stats/{key}/{stat}"] for stat in stats}
            for key, stats in theirs.items()
        }
        _assert_stats_equal(mine, theirs, f"episode {i}")

    # lerobot 0.4.4 squares uint8 pixels in uint8: the overflow makes every episode's image
    # std 0 and the dataset's the spread of the episode means. Ours is the pixels' std.
    image = "observation.images.front"
    assert all(np.all(np.asarray(ep[image]["std"]) == 0) for ep in fixture["per_episode"])
    pixels = np.concatenate([ep.obs["image.front"] for ep in episodes]).reshape(-1, 3) / 255.0
    np.testing.assert_allclose(np.ravel(ours[image]["std"]), pixels.std(0), rtol=1e-9)
    for row, ep in zip(rows, episodes, strict=True):
        frames = ep.obs["image.front"].reshape(-1, 3) / 255.0
        np.testing.assert_allclose(
            np.ravel(row[f"stats/{image}/std"]), frames.std(0), rtol=1e-9, atol=1e-12
        )


# ---- writing errors ------------------------------------------------------------------------


def test_refuses_to_overwrite_a_non_empty_folder(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(DatasetError, match="refusing to overwrite") as info:
        export_lerobot(_episodes((4,)), out)
    assert str(out) in str(info.value) and "fix:" in str(info.value)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]  # no temporary folder left
    empty = tmp_path / "empty"
    empty.mkdir()
    export_lerobot(_episodes((4,)), empty)  # an empty folder is fine
    assert (empty / "meta/info.json").is_file()


def test_a_failed_export_leaves_nothing(tmp_path: Path) -> None:
    episodes = _episodes((5, 6))
    episodes[1].obs["state"] = episodes[1].obs["state"][:, :3]
    with pytest.raises(DatasetError, match=r"'state' has shape \(6, 3\)"):
        export_lerobot(episodes, tmp_path / "ds")
    assert list(tmp_path.iterdir()) == []


def test_fps_codec_and_frame_size_errors(tmp_path: Path) -> None:
    ep = _episode(0, 4)
    ep.attrs["meta"] = {}
    with pytest.raises(DatasetError, match="no fps") as info:
        export_lerobot([ep], tmp_path / "a")
    assert "--fps" in str(info.value)
    with pytest.raises(ConfigError, match="12.5"):
        export_lerobot([ep], tmp_path / "a", fps=12.5)
    with pytest.raises(ConfigError, match="'vp9'"):
        export_lerobot([ep], tmp_path / "a", fps=10, codec="vp9")
    odd = _episode(0, 4)
    odd.obs["image.front"] = odd.obs["image.front"][:, :31]
    with pytest.raises(DatasetError, match="even"):
        export_lerobot([odd], tmp_path / "a")
    slower = _episode(1, 4)
    slower.attrs["meta"] = {"control_rate_hz": 10.0}
    with pytest.raises(DatasetError, match=r"recorded at 10.0 Hz, the first episode at 20 Hz"):
        export_lerobot([_episode(0, 4), slower], tmp_path / "a")
    assert list(tmp_path.iterdir()) == []
    export_lerobot([ep], tmp_path / "b", fps=10)
    assert json.loads((tmp_path / "b/meta/info.json").read_text())["fps"] == 10


# ---- reading -------------------------------------------------------------------------------


def test_obs_keys_skip_video_decoding(
    exported: tuple[list[EpisodeData], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    episodes, out = exported

    def no_decoding(*args: Any) -> None:
        raise AssertionError("decoded a video that was not asked for")

    monkeypatch.setattr(lerobot_reader, "_decode_range", no_decoding)
    ds = open_dataset(out, obs_keys=["state"])
    assert isinstance(ds, LeRobotDataset)
    back = ds[1]
    assert list(back.obs) == ["state"]
    np.testing.assert_array_equal(back.obs["state"], episodes[1].obs["state"])


def test_open_dataset_picks_the_format(tmp_path: Path) -> None:
    writer = DatasetWriter(tmp_path / "shards", env_args={"env_id": "test:toy"})
    for ep in _episodes((3, 4), image=False):
        writer.add(ep)
    assert isinstance(open_dataset(tmp_path / "shards"), Dataset)
    export_lerobot(Dataset(tmp_path / "shards"), tmp_path / "lr")
    ds = open_dataset(tmp_path / "lr")
    assert isinstance(ds, LeRobotDataset) and len(ds) == 2
    assert ds.env_args == {"env_id": "test:toy"}


def test_reader_errors_name_the_file_and_the_fix(
    exported: tuple[list[EpisodeData], Path], tmp_path: Path
) -> None:
    with pytest.raises(DatasetError, match="meta/info.json is missing"):
        LeRobotDataset(tmp_path)
    old = tmp_path / "v21"
    (old / "meta").mkdir(parents=True)
    (old / "meta/info.json").write_text(json.dumps({"codebase_version": "v2.1", "fps": 10}))
    with pytest.raises(DatasetError, match="'v2.1'") as info:
        open_dataset(old)
    assert "convert_dataset_v21_to_v30" in str(info.value)
    _, out = exported
    broken = tmp_path / "broken"
    shutil.copytree(out, broken)
    (broken / "videos/observation.images.front/chunk-000/file-000.mp4").unlink()
    ds = LeRobotDataset(broken)  # metadata alone opens
    with pytest.raises(DatasetError, match="file-000.mp4") as info:
        ds[0]
    assert "fix:" in str(info.value)
    assert list(LeRobotDataset(broken, obs_keys=["state"])[0].obs) == ["state"]
    (broken / "meta/tasks.parquet").unlink()
    with pytest.raises(DatasetError, match="tasks.parquet"):
        LeRobotDataset(broken)


def test_reads_the_dataset_lerobot_wrote() -> None:
    script = _load_fixture_script()
    ds = open_dataset(LEROBOT_FIXTURE)
    assert isinstance(ds, LeRobotDataset) and len(ds) == 2
    assert ds.info["features"]["observation.images.front"]["info"]["video.codec"] == "av1"
    assert ds.env_args["observation"]["state"]["names"] == ["x", "y", "z"]
    assert ds.env_args["action"]["names"] == ["dx", "dy"]
    for i, ep in enumerate(ds):
        n = script.FRAMES
        t = np.arange(n, dtype=np.float32)
        np.testing.assert_array_equal(ep.obs["state"], np.stack([t * 0 + i, t, i * 100 + t], 1))
        np.testing.assert_array_equal(ep.actions, np.stack([t * 0 + i + 0.5, t * 0.25], 1))
        np.testing.assert_array_equal(ep.rewards, (t == n - 1).astype(np.float32))
        np.testing.assert_array_equal(ep.dones, (t == n - 1).astype(np.uint8))
        assert ep.instruction == script.TASKS[i]
        assert ep.attrs["meta"]["control_rate_hz"] == script.FPS
        expected = np.stack([script.frame_image(i, k) for k in range(n)])
        mean, worst_frame, _ = _image_errors(ep.obs["image.front"], expected)
        assert mean < 3 and worst_frame < 4, (mean, worst_frame)


def test_lerobot_dataset_reexports_as_ours_and_as_lerobot(tmp_path: Path) -> None:
    source = LeRobotDataset(LEROBOT_FIXTURE)
    again = LeRobotDataset(export_lerobot(source, tmp_path / "again"))  # fps from the source
    assert again.fps == source.fps and again.tasks == source.tasks
    for a, b in zip(source, again, strict=True):
        np.testing.assert_array_equal(a.obs["state"], b.obs["state"])
        np.testing.assert_array_equal(a.actions, b.actions)
        assert a.instruction == b.instruction


# ---- CLI -----------------------------------------------------------------------------------


def test_cli_export_and_info(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from embodied.apps.cli import app

    writer = DatasetWriter(tmp_path / "shards", env_args={"env_id": "test:toy"})
    for ep in _episodes((5, 6)):
        writer.add(ep)
    runner = CliRunner()
    out = tmp_path / "lr"
    args = ["datasets", "export", str(tmp_path / "shards"), "--out", str(out)]
    result = runner.invoke(app, [*args, "--format", "lerobot", "--robot-type", "toy_arm"])
    assert result.exit_code == 0, result.output
    assert "wrote 2 episode(s), 11 frames" in result.output
    result = runner.invoke(app, ["datasets", "info", str(out), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["format"] == "lerobot v3.0" and summary["episodes"] == 2
    assert summary["frames"] == 11 and summary["fps"] == 20
    assert summary["tasks"] == ["reach target 0", "reach target 1"]
    assert summary["features"]["observation.images.front"]["codec"] == "h264"
    # the CLI writes float32 columns by default (lerobot's training expects them)
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["features"]["action"]["dtype"] == "float32"
    exact = tmp_path / "lr64"
    result = runner.invoke(
        app,
        [
            "datasets",
            "export",
            str(tmp_path / "shards"),
            "--out",
            str(exact),
            "--format",
            "lerobot",
            "--keep-dtypes",
        ],
    )
    assert result.exit_code == 0, result.output
    info = json.loads((exact / "meta" / "info.json").read_text())
    assert info["features"]["action"]["dtype"] == "float64"
    text = runner.invoke(app, ["datasets", "info", str(tmp_path / "shards")])
    assert text.exit_code == 0 and "robomimic shards" in text.output
    hdf5 = tmp_path / "all.hdf5"
    result = runner.invoke(
        app, ["datasets", "export", str(out), "--out", str(hdf5), "--format", "robomimic"]
    )
    assert result.exit_code == 0, result.output
    back = Dataset(hdf5)
    assert len(back) == 2 and back[1].instruction == "reach target 1"


def test_cli_bad_format_exits_2_naming_the_value_and_fix(tmp_path: Path) -> None:
    args = ["datasets", "export", str(tmp_path), "--out", str(tmp_path / "x")]
    proc = subprocess.run(
        [sys.executable, "-m", "embodied", *args, "--format", "parquet"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 2, proc.stderr
    assert "--format 'parquet'" in proc.stderr and "fix:" in proc.stderr
    assert "lerobot" in proc.stderr and "robomimic" in proc.stderr
