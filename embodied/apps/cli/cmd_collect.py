"""Roll out a policy (default: the scripted expert) and write successful episodes.

The episodes go into a robomimic-style shard folder. Collecting into an
existing folder resumes it after its largest seed (same env, observations and
actions only).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import h5py
import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

import policies
import sim
from embodied.apps.cli._common import parse_kv
from embodied.datasets import DatasetWriter
from embodied.datasets.hdf5 import _SHARD_RE
from embodied.errors import ConfigError
from embodied.loop import rollout


def parse_speed(text: str | None) -> dict[str, Any]:
    """``"0.3"`` -> ``{"speed": 0.3}``; ``"0.1:0.4"`` -> ``{"speed_range": (0.1, 0.4)}`` (m/s)."""
    if text is None:
        return {}
    try:
        if ":" in text:
            lo, hi = (float(x) for x in text.split(":", 1))
            return {"speed_range": (lo, hi)}
        return {"speed": float(text)}
    except ValueError as exc:
        raise ConfigError(
            f"--speed {text!r} is not a number or a LO:HI range (m/s)",
            fix="pass e.g. --speed 0.3 or --speed 0.1:0.4",
        ) from exc


def next_seed(out: Path, default: int) -> int:
    """First episode seed for a (possibly resumed) collection in ``out``.

    Continues after the largest seed recorded in existing shards, so resuming never repeats
    an episode.
    """
    seeds = [default - 1]
    if out.is_dir():
        for shard in out.iterdir():
            if not _SHARD_RE.match(shard.name):
                continue
            try:
                with h5py.File(shard, "r") as f:
                    for demo in f["data"].values():
                        seed = json.loads(demo.attrs.get("meta", "{}")).get("seed")
                        if isinstance(seed, int):
                            seeds.append(seed)
            except (OSError, KeyError, ValueError):
                continue  # a damaged shard is reported by Dataset, not here
    return max(seeds) + 1


def check_resume(out: Path, env_args: dict[str, Any]) -> None:
    """Refuse to resume a folder recorded on another env or with other observations."""
    meta = out / "meta.json"
    if not meta.exists():
        return
    try:
        old = json.loads(meta.read_text()).get("env_args", {})
    except (OSError, json.JSONDecodeError):
        return
    for key in ("env_id", "observation", "action"):
        if key in old and json.loads(json.dumps(env_args.get(key))) != old[key]:
            raise ConfigError(
                f"{out} holds episodes with a different {key} ({str(old[key])[:120]}) than "
                f"this collection ({str(env_args.get(key))[:120]})",
                fix="collect into a new --out folder, or repeat the original options",
            )


def register(app: typer.Typer) -> None:
    """Add the ``collect`` command to ``app``."""

    @app.command("collect", help=__doc__)
    def collect(
        env_id: str = typer.Option(..., "--env", help="Env id, e.g. mujoco:reach_around."),
        episodes: int = typer.Option(10, "--episodes", "-n", help="Episodes to keep."),
        out: Path = typer.Option(..., "--out", help="Dataset folder (resumed if it exists)."),
        policy: str = typer.Option("expert", "--policy", help="Policy name or checkpoint folder."),
        seed: int = typer.Option(0, "--seed", help="Seed of the first episode (then +1 each)."),
        speed: str | None = typer.Option(
            None, "--speed", help="Expert speed in m/s, or a LO:HI range drawn per episode."
        ),
        route: str | None = typer.Option(
            None, "--route", help="reach_around expert route (left/center/right; default random)."
        ),
        scene: str | None = typer.Option(None, "--scene", help="Reset scene (reach_around)."),
        camera: bool | None = typer.Option(
            None, "--camera/--no-camera", help="Record camera images (default: the task's)."
        ),
        image_size: int | None = typer.Option(None, "--image-size", help="Camera size (px)."),
        keep_failures: bool = typer.Option(
            False, "--keep-failures", help="Also keep episodes that did not succeed."
        ),
        max_attempts: int | None = typer.Option(
            None, "--max-attempts", help="Give up after this many episodes (default 3x + 10)."
        ),
        policy_arg: list[str] = typer.Option(
            [], "--policy-arg", help="Policy option key=value (repeatable)."
        ),
    ) -> None:
        if episodes <= 0:
            raise ConfigError(f"--episodes must be positive, got {episodes}")
        attempts_cap = max_attempts if max_attempts is not None else 3 * episodes + 10
        if attempts_cap < episodes:
            raise ConfigError(f"--max-attempts {attempts_cap} is below --episodes {episodes}")
        env_kwargs: dict[str, Any] = {}
        if camera is not None:
            env_kwargs["camera"] = camera
        if image_size is not None:
            env_kwargs["image_size"] = image_size
        if scene is not None:
            env_kwargs["scene"] = scene
        env = sim.make(env_id, **env_kwargs)
        pol_kwargs = {**parse_speed(speed), **parse_kv(policy_arg, "--policy-arg", "seed=3")}
        if route is not None:
            pol_kwargs["route"] = route
        pol = policies.load(policy, env=env, **pol_kwargs)

        env_args = {**env.describe(), "make_kwargs": env_kwargs, "policy": policy}
        check_resume(Path(out), env_args)
        writer = DatasetWriter(out, env_args=env_args)
        first_seed = next_seed(Path(out), seed)
        kept = failed = 0
        columns = (
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"),
        )
        with Progress(*columns, transient=False) as progress:
            bar = progress.add_task(f"collect {env_id}", total=episodes, status="")
            for attempt in range(attempts_cap):
                if kept >= episodes:
                    break
                ep = rollout(env, pol, seed=first_seed + attempt)
                ep.meta["policy"] = policy
                ep.meta["policy_kwargs"] = pol_kwargs
                for attr in ("current_route", "current_speed"):
                    if hasattr(pol, attr):
                        ep.meta[attr.removeprefix("current_")] = getattr(pol, attr)
                if ep.success or keep_failures:
                    writer.add(ep)
                    kept += 1
                    progress.advance(bar)
                if not ep.success:
                    failed += 1
                progress.update(bar, status=f"{failed} failed / {attempt + 1} run")
        env.close()
        print(
            f"kept {kept} episode(s) in {out} (shards up to #{writer.next_index - 1}); "
            f"{failed} failed"
        )
        if kept < episodes:
            raise ConfigError(
                f"only {kept} of {episodes} episodes succeeded within {attempts_cap} attempts",
                fix="raise --max-attempts, pass --keep-failures, or check the policy",
            )
