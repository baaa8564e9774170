"""``embodied demo``: the main job on the built-in MuJoCo tasks (offline, minutes on 2 cores)."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    """Add the ``demo`` command to ``app``."""

    @app.command("demo")
    def demo(
        out: Path = typer.Option(Path("reports/demo"), "--out", help="Report folder."),
        quick: bool = typer.Option(False, "--quick", help="Smaller budgets (smoke test)."),
        seed: int = typer.Option(0, "--seed", help="Base seed."),
        only: list[str] = typer.Option([], "--only", help="Run only these sections."),
    ) -> None:
        """Run experts, a PDP, a PID-steered rollout and the judge; write metrics, plots, MP4."""
        import json

        from embodied.demo import ORDER, run_demo
        from embodied.errors import ConfigError

        bad = [s for s in only if s not in ORDER]
        if bad:
            raise ConfigError(f"unknown demo sections {bad}", fix=f"choose from {list(ORDER)}")
        metrics = run_demo(out, quick=quick, seed=seed, only=tuple(only))
        print(json.dumps(metrics["sections"], indent=2))
        print(f"report written to {out}/ (metrics.json, PNG plots, MP4)")
