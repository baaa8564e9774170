"""``embodied bench <area> --json``: speed benchmarks, one JSON object per area."""

from __future__ import annotations

import json

import typer


def register(app: typer.Typer) -> None:
    """Add the ``bench`` command to ``app``."""

    @app.command("bench")
    def bench(
        area: str = typer.Argument(..., help="Benchmark area (see `embodied bench list`)."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object only."),
        quick: bool = typer.Option(False, "--quick", help="Fewer repetitions (smoke test)."),
    ) -> None:
        """Run a benchmark area with 1 torch/BLAS thread and print medians."""
        from embodied.bench import AREAS, run_area

        if area == "list":
            print("\n".join(AREAS.names()))
            return
        result = run_area(area, quick=quick)
        if as_json:
            print(json.dumps(result))
        else:
            print(json.dumps(result, indent=2))
