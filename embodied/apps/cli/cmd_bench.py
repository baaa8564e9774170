"""Run a benchmark area with 1 torch/BLAS thread and print medians.

Speed benchmarks, one JSON object per area (`--json`). `embodied bench list`
names the areas; `embodied bench all` runs every area, each in its own
process, into one report.
"""

from __future__ import annotations

import json
from typing import Any

import typer

from embodied.apps.bench import AREAS, run_area
from embodied.apps.bench._report import figures, problems, run_all, to_markdown, write_report


def register(app: typer.Typer) -> None:
    """Add the ``bench`` command to ``app``."""

    @app.command("bench", help=__doc__)
    def bench(
        area: str = typer.Argument(..., help="Benchmark area (see `embodied bench list`)."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object only."),
        quick: bool = typer.Option(False, "--quick", help="Fewer repetitions (smoke test)."),
        out: str = typer.Option(None, "--out", help="`all`: folder for bench.json + bench.md."),
        areas: str = typer.Option("", "--areas", help="`all`: comma-separated areas [every]."),
        strict: bool = typer.Option(
            False,
            "--strict",
            help="Exit 1 when a target is unmet (a missing figure counts) or an area failed.",
        ),
    ) -> None:
        if area == "list":
            print("\n".join(AREAS.names()))
            return
        if area == "all":  # every area in its own process: one JSON + one markdown table

            def done(name: str, o: dict[str, Any]) -> None:
                msg = "ok" if o["ok"] else f"FAILED: {o['error'][:200]}"
                typer.echo(f"bench {name}: {msg} ({o['seconds']:.0f} s)", err=True)

            names = [a.strip() for a in areas.split(",") if a.strip()] or None
            report = run_all(names, quick=quick, on_area=done)
            if out:
                write_report(report, out)
            print(json.dumps(report) if as_json else to_markdown(report))
        else:
            result = run_area(area, quick=quick)
            print(json.dumps(result) if as_json else json.dumps(result, indent=2))
            report = {"areas": {area: {"ok": True, "seconds": 0.0, "result": result}}}
            report["figures"] = figures(report)
        if strict:
            failed = problems(report)
            if failed:
                typer.echo(f"bench --strict: {len(failed)} problem(s):", err=True)
                for line in failed:
                    typer.echo(f"  {line}", err=True)
                raise typer.Exit(1)
