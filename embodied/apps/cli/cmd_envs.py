"""List environment ids (family:task) that `--env` accepts."""

from __future__ import annotations

import json

import typer

from sim import ENVS, list_env_ids


def register(app: typer.Typer) -> None:
    """Add the ``envs`` command to ``app``."""

    @app.command("envs", help=__doc__)
    def envs(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
        ids = list_env_ids()
        if as_json:
            print(json.dumps({"envs": ids, "unavailable": ENVS.unavailable()}, indent=2))
            return
        for env_id, help_text in ids.items():
            print(f"{env_id:45s} {help_text}")
        for mod, why in ENVS.unavailable().items():
            print(f"# {mod} not available: {why}")
