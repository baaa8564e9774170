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
from embodied.apps.cli._config_options import Opt, config_options, nest
from embodied.apps.evaluation import EvalConfig, PolicyLoader, build_grid, evaluate
from embodied.apps.evaluation.report import preflight_lines
from embodied.chunking import ChunkingConfig
from embodied.errors import ConfigError
from embodied.io import require_output_dir


def register(app: typer.Typer) -> None:
    """Add the ``eval`` command to ``app``."""

    @app.command("eval", help=__doc__)
    @config_options(
        EvalConfig,
        Opt("envs", flag="--env", many="repeat"),
        "episodes",
        "workers",
        "video_episodes",
        "seed",
        "max_steps",
        "backend",
        "judge",
        "max_episode_errors",
        "scenes",
        Opt("chunking.execution", flag="--execution"),
        Opt("chunking.threshold", flag="--async-threshold"),
        Opt("chunking.merge", flag="--merge"),
        Opt("chunking.delay_steps", flag="--delay-steps"),
        Opt("chunking.rtc", flag="--rtc", negatable=False),
        Opt("chunking.starve", flag="--starve"),
        Opt("chunking.execute_steps", flag="--execute-steps"),
        "record",
    )
    def eval_(
        policy: str = typer.Option(..., "--policy", help="Policy name or checkpoint folder."),
        out: str = typer.Option(None, "--out", help="Output folder for results and videos."),
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
        cameras: str = typer.Option(
            None,
            "--cameras",
            help="Cameras the policy sees, comma-separated ('' for none) [LIBERO: agentview; "
            "MuJoCo: the task's].",
        ),
        as_json: bool = typer.Option(False, "--json", help="Print the results JSON."),
        *,
        config: dict[str, Any],
    ) -> None:
        env, backend = config["envs"], config["backend"]
        if out:
            require_output_dir(out)
        if libero_assets:
            os.environ["EMBODIED_LIBERO_ASSETS"] = os.path.abspath(libero_assets)
        common = parse_kv(env_arg, "--env-arg", "seed=3")
        env_kwargs: dict[str, dict[str, Any]] = {"mujoco": dict(common)}
        names = None if cameras is None else tuple(c for c in cameras.split(",") if c)
        if names is not None:  # as `embodied collect --cameras`: MuJoCo's camera= option
            if "camera" in common:
                raise ConfigError(
                    f"--cameras {cameras!r} and --env-arg camera={common['camera']!r} both set "
                    "the cameras",
                    fix="pass the cameras once, with --cameras",
                )
            env_kwargs["mujoco"]["camera"] = list(names) if names else False
        if any(e.startswith("libero:") for e in env):
            # LIBERO's protocol is OpenVLA's (raw frames, LIBERO-native actions); what a
            # policy needs converted, its processor does (--policy-arg for its options).
            libero_cams = ("agentview",) if names is None else names
            env_kwargs["libero"] = {"cameras": libero_cams, **common}
        if address:
            if backend != "ray":
                raise ConfigError(
                    f"--address {address!r} is only used by --backend ray, not {backend!r}",
                    fix="add --backend ray or drop --address",
                )
            os.environ["EMBODIED_RAY_ADDRESS"] = address  # read by the ray backend
        nested = nest(config)
        chunking = ChunkingConfig(**nested.pop("chunking", {}))
        eval_config = EvalConfig(**nested, out=out, env_kwargs=env_kwargs, chunking=chunking)
        total = len(build_grid(eval_config))
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
                    error = str(data.get("error") or "").strip()
                    console.print(f"episode failed: {error.splitlines()[0] if error else '?'}")
                elif kind == "preflight" and not as_json:
                    console.print("\n".join(preflight_lines(data["preflight"])).strip())
                elif kind == "worker_died":
                    console.print(f"worker {data['pid']} died; rerunning its episode")

            result = evaluate(
                eval_config,
                PolicyLoader(
                    policy, parse_kv(policy_arg, "--policy-arg", "seed=3"), eval_config.chunking
                ),
                on_event,
            )
        if as_json:
            print(json.dumps(result.to_dict(), default=str))
            return
        print(result.markdown())
        if out:
            console.print(f"wrote {out}/results.json and {out}/results.md")
