"""Run experts, a PDP, a PID-steered rollout and the judge; write metrics, plots, MP4.

The main job on the built-in MuJoCo tasks (offline, minutes on 2 cores).
"""

from __future__ import annotations

from pathlib import Path

import typer

from embodied.apps import demo as demo_module
from embodied.errors import ConfigError


def register(app: typer.Typer) -> None:
    """Add the ``demo`` command to ``app``."""

    @app.command("demo", help=__doc__)
    def demo(
        out: Path = typer.Option(Path("reports/demo"), "--out", help="Report folder."),
        quick: bool = typer.Option(False, "--quick", help="Smaller budgets (smoke test)."),
        seed: int = typer.Option(0, "--seed", help="Base seed."),
        only: list[str] = typer.Option([], "--only", help="Run only these sections."),
    ) -> None:
        bad = [s for s in only if s not in demo_module.ORDER]
        if bad:
            raise ConfigError(
                f"unknown demo sections {bad}", fix=f"choose from {list(demo_module.ORDER)}"
            )
        metrics = demo_module.run_demo(out, quick=quick, seed=seed, only=tuple(only))
        # a few lines per section; every figure is in metrics.json
        demo_module.print_summary(metrics, out)
