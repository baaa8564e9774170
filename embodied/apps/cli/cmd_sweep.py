"""Sweep controller gains x setpoints; write one table (JSON + markdown) and one plot.

Closed-loop steering over the grid, episodes per point, on local workers or a
Ray cluster.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from embodied.apps.cli._common import episode_progress, parse_kv
from embodied.apps.cli._config_options import Opt, config_options
from embodied.apps.evaluation.sweep import SweepConfig, parse_axis, run_sweep
from embodied.errors import ConfigError


def register(app: typer.Typer) -> None:
    """Add the ``sweep`` command to ``app``."""

    @app.command("sweep", help=__doc__)
    @config_options(
        SweepConfig,
        Opt("env", default="mujoco:arm_reach"),  # the config has no default env / policy
        Opt("policy", default="expert_speed_knob"),
        "controller",
        "concept",
        "knob",
        "setpoint",
        "episodes",
        "max_steps",
        "settle_s",
        "seed",
        Opt("workers", default=2),  # the command runs local workers by default
        "backend",
        "address",
    )
    def sweep(
        grid: list[str] = typer.Option(
            ...,
            "--grid",
            help="Axis NAME=V1,V2 (repeatable): controller params, setpoint, policy.X, concept.X.",
        ),
        set_: list[str] = typer.Option(
            [], "--set", help="Fixed controller parameter key=value (repeatable), e.g. ki=50."
        ),
        gains: Path | None = typer.Option(
            None,
            "--gains",
            help="Controller YAML to start from (as `embodied tune` saves it, also read by "
            "`tune --gains` and `deploy --controller`); --set and --grid override its values.",
        ),
        policy_arg: list[str] = typer.Option([], "--policy-arg", help="Policy option key=value."),
        env_arg: list[str] = typer.Option([], "--env-arg", help="Env option key=value."),
        out: str = typer.Option(None, "--out", help="Folder for sweep.json, sweep.md, sweep.png."),
        as_json: bool = typer.Option(False, "--json", help="Print the result JSON."),
        *,
        config: dict[str, Any],
    ) -> None:
        base: dict[str, Any] = {}
        if gains is not None:
            import controllers

            ctype, base = controllers.read_params(gains)
            if ctype != config["controller"]:
                raise ConfigError(
                    f"--gains {gains} holds a {ctype!r} controller, not --controller "
                    f"{config['controller']!r}",
                    fix=f"pass --controller {ctype}",
                )
        sweep_config = SweepConfig(
            **config,
            grid=dict(parse_axis(g) for g in grid),
            controller_params={**base, **parse_kv(set_, "--set", "ki=50")},
            policy_kwargs=parse_kv(policy_arg, "--policy-arg", "ki=50"),
            env_kwargs=parse_kv(env_arg, "--env-arg", "ki=50"),
            out=out,
        )
        total = len(sweep_config.points) * sweep_config.episodes
        console = Console(stderr=True)
        with episode_progress(console, quiet=as_json) as progress:
            bar = progress.add_task("episodes", total=total)

            def on_event(kind: str, data: dict[str, Any]) -> None:
                if kind in ("done", "failed"):
                    progress.update(bar, advance=1)
                elif kind == "worker_died":
                    spec = data.get("spec")
                    held = "" if spec is None else f" holding episode {spec.index} ({spec.variant})"
                    console.print(
                        f"worker {data['pid']} died{held}; rerunning it "
                        f"(attempt {int(data['attempts'] or 0) + 1})"
                    )

            result = run_sweep(sweep_config, on_event)
        if as_json:
            print(json.dumps(result.to_dict(), default=str))
            return
        print(result.markdown())
        if out:
            console.print(f"wrote {os.path.join(out, 'sweep.json')}, sweep.md and sweep.png")
