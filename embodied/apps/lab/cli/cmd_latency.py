"""Inference latency vs chunk execution: synchronous, asynchronous, asynchronous + RTC.

Trains plain diffusion policies on expert demonstrations (one per training seed; state only on
mujoco:reach_around, or visuomotor with --cameras, e.g. mujoco:arm_reach with front,top), then rolls each out with 0-8 control steps of simulated inference latency executed
synchronously, asynchronously (naive switch) and asynchronously with real-time chunking:
success (Wilson 95 %), missed control periods and the action jump at chunk boundaries, into
OUT/latency.{json,md,png}. Resumable: demonstrations, policies and finished cells are reused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from embodied.apps.cli._config_options import config_options
from embodied.apps.lab.latency import LatencyConfig, run_experiment


def register(app: typer.Typer) -> None:
    """Add the ``latency`` command to ``app``."""

    @app.command("latency", help=__doc__)
    @config_options(
        LatencyConfig,
        "env",
        "delays",
        "methods",
        "episodes",
        "training_seeds",
        "demonstrations",
        "train_steps",
        "horizon",
        "n_action_steps",
        "eval_seed",
        "cameras",
        "image_size",
        "exclude_state",
    )
    def latency_cmd(
        out: Path = typer.Option(Path("runs/latency"), "--out", help="Output folder."),
        *,
        config: dict[str, Any],
    ) -> None:
        cfg = LatencyConfig(**config)

        def on_cell(method: str, delay: int, seed: int, cell: dict[str, Any]) -> None:
            typer.echo(
                f"{method} delay {delay} seed {seed}: {cell['successes']}/{cell['n']}, missed "
                f"{cell['missed_periods']:.1f}/episode, boundary jump {cell['boundary_jump']:.3f}",
                err=True,
            )

        run_experiment(cfg, out, on_cell)
        print((out / "latency.md").read_text())
