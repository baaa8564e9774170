"""Evaluate a policy: per-task success with Wilson 95% CIs, suite averages, videos.

Success rates of a policy on env tasks (mujoco:<task>) and LIBERO suites
(libero:<suite>).
"""

from __future__ import annotations

import json
import os
from typing import Any

import typer
from rich.console import Console

from embodied.apps.cli._common import episode_progress, parse_kv
from embodied.apps.evaluation import EvalConfig, PolicyLoader, build_grid, evaluate
from embodied.errors import ConfigError
from sim.libero import LiberoProtocol


def _parse_ints(text: str, what: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(
            f"{what} {text!r} must be comma-separated episode indices", fix=f"e.g. {what} 0,1"
        ) from None


def register(app: typer.Typer) -> None:
    """Add the ``eval`` command to ``app``."""

    @app.command("eval", help=__doc__)
    def eval_(
        env: list[str] = typer.Option(
            ..., "--env", help="Env id; repeatable. libero:<suite>[:task] or mujoco:<task>."
        ),
        policy: str = typer.Option(..., "--policy", help="Policy name or checkpoint folder."),
        episodes: int = typer.Option(
            None, "--episodes", help="Episodes per task (default: 50 for LIBERO, else 10)."
        ),
        workers: int = typer.Option(1, "--workers", help="Worker processes (0: inline)."),
        out: str = typer.Option(None, "--out", help="Output folder for results and videos."),
        video_episodes: str = typer.Option(
            "", "--video-episodes", help="Episode indices per task to save as MP4, e.g. 0,1."
        ),
        seed: int = typer.Option(0, "--seed", help="Base seed (episode k uses seed + k)."),
        max_steps: int = typer.Option(None, "--max-steps", help="Override the step limit."),
        backend: str = typer.Option(
            "local", "--backend", help="Execution backend: local, inline or ray."
        ),
        address: str = typer.Option(
            None, "--address", help="--backend ray: cluster auto or HOST:PORT [private local Ray]."
        ),
        policy_arg: list[str] = typer.Option(
            [], "--policy-arg", help="Policy option key=value (repeatable)."
        ),
        env_arg: list[str] = typer.Option(
            [], "--env-arg", help="Env option key=value for every env family (repeatable)."
        ),
        libero_assets: str = typer.Option(
            None,
            "--libero-assets",
            help=f"Local LIBERO assets folder (or ${'EMBODIED_LIBERO_ASSETS'}).",
        ),
        protocol: str = typer.Option(
            "libero", "--protocol", help="LIBERO protocol preset: libero or openvla."
        ),
        cameras: str = typer.Option(
            "agentview", "--cameras", help="LIBERO cameras, comma-separated ('' for none)."
        ),
        judge: str = typer.Option(
            None,
            "--judge",
            help="Judge each episode (e.g. minijudge) and report judge-vs-oracle agreement.",
        ),
        as_json: bool = typer.Option(False, "--json", help="Print the results JSON."),
    ) -> None:
        if protocol not in ("libero", "openvla"):
            raise ConfigError(f"--protocol {protocol!r} unknown; options: libero, openvla")
        if libero_assets:
            os.environ["EMBODIED_LIBERO_ASSETS"] = os.path.abspath(libero_assets)
        common = parse_kv(env_arg, "--env-arg", "seed=3")
        env_kwargs: dict[str, dict[str, Any]] = {"mujoco": dict(common)}
        if any(e.startswith("libero:") for e in env):
            proto = LiberoProtocol.openvla() if protocol == "openvla" else LiberoProtocol()
            env_kwargs["libero"] = {
                "protocol": proto,
                "cameras": tuple(c for c in cameras.split(",") if c),
                **common,
            }
        if address:
            if backend != "ray":
                raise ConfigError(
                    f"--address {address!r} is only used by --backend ray, not {backend!r}",
                    fix="add --backend ray or drop --address",
                )
            os.environ["EMBODIED_RAY_ADDRESS"] = address  # read by the ray backend
        config = EvalConfig(
            envs=tuple(env),
            episodes=episodes,
            workers=workers,
            out=out,
            video_episodes=_parse_ints(video_episodes, "--video-episodes"),
            seed=seed,
            env_kwargs=env_kwargs,
            max_steps=max_steps,
            backend=backend,
            judge=judge,
        )
        total = len(build_grid(config))
        console = Console(stderr=True)
        with episode_progress(console, quiet=as_json) as progress:
            bar = progress.add_task("episodes", total=total)
            wins = 0

            def on_event(kind: str, data: dict[str, Any]) -> None:
                nonlocal wins
                if kind == "done":
                    wins += int(data["record"].success)
                    progress.update(bar, advance=1, description=f"episodes ({wins} successes)")
                elif kind == "failed":
                    progress.update(bar, advance=1)
                elif kind == "worker_died":
                    console.print(f"worker {data['pid']} died; rerunning its episode")

            result = evaluate(
                config,
                PolicyLoader(policy, parse_kv(policy_arg, "--policy-arg", "seed=3")),
                on_event,
            )
        if as_json:
            print(json.dumps(result.to_dict(), default=str))
            return
        print(result.markdown())
        if out:
            console.print(f"wrote {out}/results.json and {out}/results.md")
