"""Sweep controller gains x setpoints; write one table (JSON + markdown) and one plot.

Closed-loop steering over the grid, episodes per point, on local workers or a
Ray cluster.
"""

from __future__ import annotations

import json
import os
from typing import Any

import typer
from rich.console import Console

from embodied.apps.cli._common import episode_progress, parse_kv
from embodied.apps.evaluation.sweep import SweepConfig, parse_axis, run_sweep


def register(app: typer.Typer) -> None:
    """Add the ``sweep`` command to ``app``."""

    @app.command("sweep", help=__doc__)
    def sweep(
        env: str = typer.Option("mujoco:arm_reach", "--env", help="Env id of the task."),
        policy: str = typer.Option(
            "expert_speed_knob", "--policy", help="Steerable policy name or checkpoint folder."
        ),
        controller: str = typer.Option("pid", "--controller", help="Controller name."),
        grid: list[str] = typer.Option(
            ...,
            "--grid",
            help="Axis NAME=V1,V2 (repeatable): controller params, setpoint, policy.X, concept.X.",
        ),
        set_: list[str] = typer.Option(
            [], "--set", help="Fixed controller parameter key=value (repeatable), e.g. ki=50."
        ),
        concept: str = typer.Option("ee_speed", "--concept", help="Measured concept."),
        knob: str = typer.Option("alpha", "--knob", help="Policy knob the controller drives."),
        setpoint: float = typer.Option(
            None, "--setpoint", help="Setpoint (concept units) unless 'setpoint' is an axis."
        ),
        episodes: int = typer.Option(2, "--episodes", help="Episodes (seeds) per grid point."),
        max_steps: int = typer.Option(None, "--max-steps", help="Step limit per episode."),
        settle_s: float = typer.Option(
            0.0, "--settle-s", help="Seconds excluded from the tracking error (transient)."
        ),
        seed: int = typer.Option(0, "--seed", help="Base seed (episode k uses seed + k)."),
        workers: int = typer.Option(2, "--workers", help="Workers / Ray actors (0: inline)."),
        backend: str = typer.Option("local", "--backend", help="local, inline or ray."),
        address: str = typer.Option(
            None, "--address", help="Ray cluster: auto or HOST:PORT (default: private local Ray)."
        ),
        policy_arg: list[str] = typer.Option([], "--policy-arg", help="Policy option key=value."),
        env_arg: list[str] = typer.Option([], "--env-arg", help="Env option key=value."),
        out: str = typer.Option(None, "--out", help="Folder for sweep.json, sweep.md, sweep.png."),
        as_json: bool = typer.Option(False, "--json", help="Print the result JSON."),
    ) -> None:
        config = SweepConfig(
            env=env,
            policy=policy,
            grid=dict(parse_axis(g) for g in grid),
            controller=controller,
            controller_params=parse_kv(set_, "--set", "ki=50"),
            concept=concept,
            knob=knob,
            setpoint=setpoint,
            policy_kwargs=parse_kv(policy_arg, "--policy-arg", "ki=50"),
            env_kwargs=parse_kv(env_arg, "--env-arg", "ki=50"),
            episodes=episodes,
            seed=seed,
            max_steps=max_steps,
            settle_s=settle_s,
            workers=workers,
            backend=backend,
            address=address,
            out=out,
        )
        total = len(config.points) * episodes
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

            result = run_sweep(config, on_event)
        if as_json:
            print(json.dumps(result.to_dict(), default=str))
            return
        print(result.markdown())
        if out:
            console.print(f"wrote {os.path.join(out, 'sweep.json')}, sweep.md and sweep.png")
