"""Datasets: import robot recordings, export to LeRobotDataset v3 or robomimic HDF5, describe.

`import` turns a rosbag1 (.bag), rosbag2 (folder, .db3, .mcap) or MCAP recording into our
episode shards (a mapping names its state, action, camera and instruction topics; our own
`--record` files need none). `export` reads our episode shards, a robomimic .hdf5 file or a
LeRobotDataset v3 folder and writes it as a LeRobotDataset v3 folder (parquet + MP4, lerobot's
layout) or one robomimic .hdf5 file. `info` prints a dataset's format, episodes, frames,
features and tasks.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import typer

from embodied.datasets import (
    Dataset,
    EpisodeData,
    LeRobotDataset,
    export_lerobot,
    export_robomimic,
    is_lerobot_dataset,
    open_dataset,
    write_episode_file,
)
from embodied.datasets.lerobot import CODECS
from embodied.errors import ConfigError, DatasetError

FORMATS = ("lerobot", "robomimic")

datasets_app = typer.Typer(help=__doc__, no_args_is_help=True)


@datasets_app.command("export")
def export(
    src: Path = typer.Argument(..., help="Shard folder, robomimic .hdf5 or LeRobotDataset folder."),
    out: Path = typer.Option(..., "--out", help="Output folder (lerobot) or .hdf5 file."),
    fmt: str = typer.Option(..., "--format", help="lerobot or robomimic."),
    fps: float = typer.Option(
        None, "--fps", help="Frames per second (default: the episodes' control rate)."
    ),
    robot_type: str = typer.Option("unknown", "--robot-type", help="info.json robot_type."),
    codec: str = typer.Option(
        "h264", "--codec", help="Video codec: h264, hevc or libsvtav1 (av1)."
    ),
    crf: int = typer.Option(23, "--crf", help="Video quality (lower is better)."),
    float32: bool = typer.Option(
        True,
        "--float32/--keep-dtypes",
        help="Store float columns as float32, as lerobot's own datasets do (its training "
        "expects float32); --keep-dtypes keeps float64 actions for an exact round trip.",
    ),
    repo_id: str = typer.Option(None, "--repo-id", help="Hub id to record (informational)."),
) -> None:
    """Export a dataset as a LeRobotDataset v3 folder or one robomimic .hdf5 file."""
    if fmt not in FORMATS:
        raise ConfigError(
            f"--format {fmt!r} is not one of {', '.join(FORMATS)}",
            fix="pass --format lerobot (LeRobotDataset v3 folder) or --format robomimic (.hdf5)",
        )
    if fmt == "lerobot":
        if codec not in (*CODECS, "av1"):
            raise ConfigError(
                f"--codec {codec!r} is not one of {', '.join([*CODECS, 'av1'])}",
                fix="pass --codec h264 (default), hevc or libsvtav1",
            )
        if fps is not None and fps <= 0:
            raise ConfigError(f"--fps {fps} is not positive", fix="pass e.g. --fps 20")
        episodes = open_dataset(src)
        path = export_lerobot(
            episodes,
            out,
            fps=fps,
            robot_type=robot_type,
            codec=codec,
            crf=crf,
            repo_id=repo_id,
            float_dtype="float32" if float32 else None,
        )
        ds = LeRobotDataset(path)
        print(f"wrote {len(ds)} episode(s), {ds.num_frames} frames to {path} (LeRobotDataset v3.0)")
        return
    if out.exists():
        raise DatasetError(
            f"{str(out)!r} already exists; refusing to overwrite it",
            fix="choose a new --out file, or delete the old one first",
        )
    if is_lerobot_dataset(src):
        source = LeRobotDataset(src)
        write_episode_file(out, list(source), source.env_args)
        count = len(source)
    else:
        export_robomimic(src, out)
        count = len(Dataset(out, obs_keys=[]))
    print(f"wrote {count} episode(s) to {out} (robomimic HDF5)")


def _describe(path: Path) -> dict[str, Any]:
    """Format, episodes, frames, fps, features and tasks of the dataset at ``path``."""
    if is_lerobot_dataset(path):
        ds = LeRobotDataset(path, obs_keys=[])
        return {
            "path": str(path),
            "format": f"lerobot {ds.info.get('codebase_version')}",
            "episodes": len(ds),
            "frames": ds.num_frames,
            "fps": ds.fps,
            "robot_type": ds.info.get("robot_type"),
            "features": {
                key: {
                    "dtype": ft.get("dtype"),
                    "shape": ft.get("shape"),
                    **(
                        {"codec": ft["info"].get("video.codec")}
                        if isinstance(ft.get("info"), dict) and "video.codec" in ft["info"]
                        else {}
                    ),
                }
                for key, ft in ds.features.items()
            },
            "tasks": [ds.tasks[i] for i in sorted(ds.tasks)],
        }
    light: Sequence[EpisodeData] = Dataset(path, obs_keys=[])
    frames = sum(len(ep) for ep in light)
    first = Dataset(path)[0] if len(light) else None
    features: dict[str, Any] = {}
    if first is not None:
        for key, arr in {**first.obs, "actions": first.actions}.items():
            features[key] = {"dtype": str(arr.dtype), "shape": list(arr.shape[1:])}
    tasks = list(dict.fromkeys(ep.instruction for ep in light))
    rate = getattr(light, "env_args", {}).get("control_rate_hz")
    return {
        "path": str(path),
        "format": "robomimic " + ("shards" if path.is_dir() else "file"),
        "episodes": len(light),
        "frames": frames,
        "fps": rate,
        "env_id": getattr(light, "env_args", {}).get("env_id"),
        "features": features,
        "tasks": tasks,
    }


@datasets_app.command("import")
def import_cmd(
    bag: Path = typer.Argument(
        ..., help="rosbag1 .bag, rosbag2 folder or .db3, or .mcap (ours or any ROS 1/2 one)."
    ),
    out: Path = typer.Option(..., "--out", help="New dataset folder (episode shards)."),
    mapping: Path = typer.Option(
        None,
        "--map",
        help="Mapping YAML: clock or rate_hz, max_skew_s, state/action/cameras topics and "
        "fields, instruction, episodes (see embodied/datasets/bags.py); none for files "
        "recorded with --record.",
    ),
    min_steps: int = typer.Option(2, "--min-steps", help="Shorter episodes are left out."),
) -> None:
    """Import a robot recording as a dataset (train on it, or export it to LeRobot v3)."""
    from embodied.datasets.bags import import_bag, load_mapping

    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(
            f"--out {str(out)!r} exists and is not an empty folder; an import never adds to "
            "or replaces a dataset",
            fix="pass a new --out folder",
        )
    if min_steps < 1:
        raise ConfigError(f"--min-steps {min_steps} must be >= 1", fix="e.g. --min-steps 2")
    result = import_bag(
        bag, out, None if mapping is None else load_mapping(mapping), min_steps=min_steps
    )
    cut = " (the file was cut off: read up to its last complete chunk)" if result.truncated else ""
    print(
        f"imported {result.episodes} episodes, {result.steps} steps into {out}; "
        f"{result.dropped_ticks} ticks dropped (a stream beyond max_skew_s){cut}"
    )


@datasets_app.command("info")
def info(
    path: Path = typer.Argument(
        ..., help="Shard folder, robomimic .hdf5 or LeRobotDataset folder."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Print a dataset's format, episodes, frames, features and tasks."""
    summary = _describe(path)
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    for key in ("path", "format", "episodes", "frames", "fps", "robot_type", "env_id"):
        if summary.get(key) is not None:
            print(f"{key + ':':12s}{summary[key]}")
    print("features:")
    for key, ft in summary["features"].items():
        extra = f"  {ft['codec']}" if "codec" in ft else ""
        print(f"  {key:40s}{ft['dtype']:10s}{ft['shape']}{extra}")
    print(f"tasks ({len(summary['tasks'])}):")
    for task in summary["tasks"]:
        print(f"  {task}")


def register(app: typer.Typer) -> None:
    """Add the ``datasets`` command group to ``app``."""
    app.add_typer(datasets_app, name="datasets")
