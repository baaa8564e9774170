"""Roll out a policy (default: the scripted expert) and write successful episodes.

The episodes go into a robomimic-style shard folder. Collecting into an
existing folder resumes it after its largest seed (same env, observations and
actions only). A LIBERO suite (libero:libero_object) collects every task into
one <task>_demo.hdf5 each, --workers tasks at once; rerunning skips the tasks
whose file exists.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn

from embodied.apps.cli._common import parse_kv
from embodied.apps.cli._config_options import Opt, config_options
from embodied.apps.collect import CollectConfig, CollectResult, collect, collect_tasks
from embodied.io import require_output_dir
from embodied.progress import LoggedProgress


def register(app: typer.Typer) -> None:
    """Add the ``collect`` command to ``app``."""

    @app.command("collect", help=__doc__)
    @config_options(
        CollectConfig,
        "env",
        Opt("episodes", aliases=("-n",)),
        "policy",
        "seed",
        Opt("speed", type=str),
        "route",
        "scene",
        "camera",
        "cameras",
        "image_size",
        Opt("keep_failures", negatable=False),
        "max_attempts",
        "action_noise",
        "noise_time_constant",
        "init_states",
        "workers",
    )
    def collect_cmd(
        out: Path = typer.Option(..., "--out", help="Dataset folder (resumed if it exists)."),
        policy_arg: list[str] = typer.Option(
            [], "--policy-arg", help="Policy option key=value (repeatable)."
        ),
        *,
        config: dict[str, Any],
    ) -> None:
        require_output_dir(out)
        kwargs = parse_kv(policy_arg, "--policy-arg", "seed=3")
        cfg = CollectConfig(**config, policy_kwargs=kwargs)
        columns = (
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"),
        )
        with LoggedProgress(*columns, transient=False) as progress:
            total = cfg.episodes * len(collect_tasks(cfg))  # every task of a LIBERO suite
            bar = progress.add_task(f"collect {cfg.env}", total=total, status="")

            def on_attempt(result: CollectResult) -> None:
                status = f"{result.failed} failed / {result.attempts} run"
                progress.update(bar, completed=result.kept, status=status)

            result = collect(cfg, out, on_attempt)
        print(
            f"kept {result.kept} episode(s) in {out} (shards up to #{result.last_shard}); "
            f"{result.failed} failed"
        )
