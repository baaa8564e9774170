"""Run the closed loop on a robot; Ctrl-C (or SIGTERM) stops it safely.

Every stop - time limit, Ctrl-C, fault, error - leaves the robot commanded to
hold its measured position. A second Ctrl-C aborts at once (the stop command
is still sent).
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import typer

from embodied.apps.cli._common import parse_kv
from embodied.apps.cli._config_options import Opt, config_options
from embodied.apps.deploy import DeployConfig, deploy
from embodied.io import require_output_dir
from hardware.configuration_robot import resolve_robot


def register(app: typer.Typer) -> None:
    """Add the ``deploy`` command to ``app``."""

    @app.command("deploy", help=__doc__)
    @config_options(
        DeployConfig,
        "policy",
        "controller",
        Opt("rate_hz", flag="--rate"),
        Opt("dry_run", negatable=False),
        "max_seconds",
        "episodes",
        "instruction",
        Opt("clear_estop", negatable=False),
        "shield",
        "shield_measure",
        "record",
        "foxglove",
    )
    def deploy_cmd(
        robot: str = typer.Option(
            ...,
            "--robot",
            help="Robot config YAML (see hardware/configs/sim_arm.yaml) or rosbridge://host:port "
            "(default config at that server).",
        ),
        out: str = typer.Option(..., "--out", help="Output folder (episodes/, summary.json)."),
        policy_arg: list[str] = typer.Option(
            [], "--policy-arg", help="Policy option key=value (repeatable), e.g. amplitude_rad=0.3."
        ),
        verbose: bool = typer.Option(False, "--verbose", "-v", help="Log every safety clip."),
        *,
        config: dict[str, Any],
    ) -> None:
        require_output_dir(out)
        kwargs = parse_kv(policy_arg, "--policy-arg", "amplitude_rad=0.3")
        run = DeployConfig(**config, policy_kwargs=kwargs)
        robot_config = resolve_robot(robot)
        out_dir = Path(out)
        out_dir.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(out_dir / "deploy.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        console = logging.StreamHandler(sys.stderr)
        console.setLevel(logging.INFO if verbose else logging.ERROR)
        console.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        root.setLevel(logging.INFO)
        root.addHandler(handler)
        root.addHandler(console)

        stop = threading.Event()

        def on_signal(signum: int, _frame: object) -> None:
            if stop.is_set():
                raise KeyboardInterrupt
            print(
                f"{signal.Signals(signum).name}: stopping (robot commanded to hold)",
                file=sys.stderr,
                flush=True,
            )
            stop.set()

        old_int = signal.signal(signal.SIGINT, on_signal)
        old_term = signal.signal(signal.SIGTERM, on_signal)
        try:
            what = "simulated robot (dry run)" if run.dry_run else robot_config.ros.url
            print(
                f"deploy {run.policy!r} on {robot_config.name} via {what}, "
                f"{run.rate_hz or robot_config.control_rate_hz:g} Hz, <= {run.max_seconds:g} s",
                flush=True,
            )
            result = deploy(robot_config, run, out_dir, stop_event=stop)
        finally:
            signal.signal(signal.SIGINT, old_int)
            signal.signal(signal.SIGTERM, old_term)
            root.removeHandler(handler)
            root.removeHandler(console)
            handler.close()
        s = result.summary
        print(
            json.dumps(
                {
                    k: s.get(k)
                    for k in (
                        "reason",
                        "steps",
                        "duration_s",
                        "commands_sent",
                        "stop_command_rad",
                        "fault",
                    )
                }
            ),
            flush=True,
        )
        print(f"episodes: {out_dir / 'episodes'}  summary: {out_dir / 'summary.json'}")
        # sys.exit, not typer.Exit: the app runs with standalone_mode=False, which turns
        # typer.Exit into a return value that embodied.apps.cli.main does not pass on.
        if result.reason == "fault":
            print(f"error: stopped on a safety fault: {result.fault}", file=sys.stderr)
            sys.exit(3)
        if result.reason == "stopped":
            sys.exit(130)
