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

import typer

from embodied.apps.cli._common import parse_kv
from embodied.apps.deploy import deploy
from hardware.configuration_robot import resolve_robot


def register(app: typer.Typer) -> None:
    """Add the ``deploy`` command to ``app``."""

    @app.command("deploy", help=__doc__)
    def deploy_cmd(
        robot: str = typer.Option(
            ...,
            "--robot",
            help="Robot config YAML (see hardware/configs/sim_arm.yaml) or rosbridge://host:port "
            "(default config at that server).",
        ),
        policy: str = typer.Option(
            ..., "--policy", help="Policy name (hold, sine, expert, ...) or checkpoint folder."
        ),
        out: str = typer.Option(..., "--out", help="Output folder (episodes/, summary.json)."),
        controller: str = typer.Option(
            None, "--controller", help="Controller YAML steering a policy knob (gains + meta)."
        ),
        rate: float = typer.Option(None, "--rate", help="Control rate in Hz (default: config)."),
        dry_run: bool = typer.Option(
            False, "--dry-run", help="Run the same loop against the simulated robot."
        ),
        max_seconds: float = typer.Option(
            30.0, "--max-seconds", help="Time limit per episode (s)."
        ),
        episodes: int = typer.Option(1, "--episodes", help="Episodes to run."),
        instruction: str = typer.Option("", "--instruction", help="Task instruction."),
        policy_arg: list[str] = typer.Option(
            [], "--policy-arg", help="Policy option key=value (repeatable), e.g. amplitude_rad=0.3."
        ),
        clear_estop: bool = typer.Option(
            False,
            "--clear-estop",
            help="Call the robot's enable service first (clears a latched robot e-stop).",
        ),
        verbose: bool = typer.Option(False, "--verbose", "-v", help="Log every safety clip."),
    ) -> None:
        kwargs = parse_kv(policy_arg, "--policy-arg", "amplitude_rad=0.3")
        config = resolve_robot(robot)
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
            what = "simulated robot (dry run)" if dry_run else config.ros.url
            print(
                f"deploy {policy!r} on {config.name} via {what}, "
                f"{rate or config.control_rate_hz:g} Hz, <= {max_seconds:g} s",
                flush=True,
            )
            result = deploy(
                config,
                policy,
                out_dir,
                dry_run=dry_run,
                rate_hz=rate,
                max_seconds=max_seconds,
                episodes=episodes,
                controller=controller,
                instruction=instruction,
                policy_kwargs=kwargs,
                stop_event=stop,
                clear_estop=clear_estop,
            )
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
