"""Serve a live tuning page for a steered rollout (http://127.0.0.1:8765 by default).

The built-in task is mujoco:arm_reach with the scripted expert; the controller
sets its speed knob alpha so that ee_speed (m/s) tracks the setpoint. Saved
gains files are the controller YAML that `embodied deploy --controller` loads
(`embodied eval` runs no controller; `embodied sweep` takes gains as --set).

Examples:

  embodied tune                      # the page on http://127.0.0.1:8765/
  embodied tune --host 0.0.0.0 --token SECRET --allow-host robot-pc.local
      # reachable from the network (token required; the page answers
      # only to the names allowed)
  embodied tune --step-test          # the page's step experiment, headless
  embodied tune --autotune 12 --step-test
      # auto-tune, save <out>/autotuned.yaml, measure
  embodied tune --step-test --gains tune-out/autotuned.yaml
  embodied tune --robot hardware/configs/sim_arm.yaml --dry-run --policy P
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import typer

from embodied.apps.cli._config_options import Opt, config_options
from embodied.apps.tune import ServerConfig, TuneConfig, TuneSession, experiments, gains_io
from embodied.apps.tune.configuration_tune import is_loopback
from embodied.apps.tune.server import TuneServer
from embodied.apps.tune.task import build_robot_task, build_task


def register(app: typer.Typer) -> None:
    """Add the ``tune`` command to ``app``."""

    @app.command("tune", help=__doc__)
    @config_options(
        TuneConfig,
        Opt("env_id", flag="--env"),
        "policy",
        "concept",
        "knob",
        "setpoint",
        "controller",
        "seed",
        "pace",
        "hold",
        "seed_mode",
        "step_from",
        "step_to",
        "settle_band",
        "step_hold_s",
        "step_dwell_s",
        "step_timeout_s",
        "max_overshoot_pct",
        "autotune_method",
        "record",
        "foxglove",
    )
    @config_options(
        ServerConfig,
        "host",
        "port",
        "token",
        Opt("allowed_hosts", flag="--allow-host", many="repeat"),
        into="serving",
    )
    def tune(
        gains: Path | None = typer.Option(
            None,
            "--gains",
            help="Controller YAML to start from (as saved by the page); the same file works "
            "with `embodied sweep --gains` and `embodied deploy --controller`.",
        ),
        out: Path = typer.Option(
            Path("tune-out"), "--out", help="Folder for gains files and experiment results."
        ),
        step_test: bool = typer.Option(
            False,
            "--step-test",
            help="Run the page's step-response experiment headless and print its figures.",
        ),
        autotune: int = typer.Option(
            0,
            "--autotune",
            help="Run the page's auto-tuner headless with this many step tests; writes <out>/autotuned.yaml.",
        ),
        as_json: bool = typer.Option(False, "--json", help="Print experiment results as JSON."),
        robot: str | None = typer.Option(
            None,
            "--robot",
            help="Tune on a robot: config YAML or rosbridge://host:port (instead of --env).",
        ),
        dry_run: bool = typer.Option(
            False, "--dry-run", help="With --robot: the simulated robot, not ROS."
        ),
        max_seconds: float = typer.Option(
            20.0, "--max-seconds", help="With --robot: episode length (s)."
        ),
        *,
        config: dict[str, Any],
        serving: dict[str, Any],
    ) -> None:
        headless = step_test or autotune > 0
        host, port = serving["host"], serving["port"]
        if port == 0 and not headless:
            with socket.socket() as sock:  # a free port, so the printed URL is the real one
                sock.bind((host, 0))
                port = int(sock.getsockname()[1])
        server_cfg = None if headless else ServerConfig(**{**serving, "port": port})
        cfg = TuneConfig(**config, out_dir=out)
        if robot is not None:
            task = build_robot_task(cfg, robot, dry_run=dry_run, max_seconds=max_seconds)
        else:
            task = build_task(cfg, camera=not headless)
        try:
            session = TuneSession(task, cfg)
            if gains is not None:
                gains_io.load_path(session, Path(gains))
        except BaseException:
            if task.on_close is not None:
                task.on_close()  # e.g. stop and disconnect the robot
            raise
        if headless:
            results: dict[str, Any] = {}
            try:
                if autotune > 0:
                    res = experiments.autotune(session, cfg.step_from, cfg.step_to, autotune)
                    results["autotune"] = {k: v for k, v in res.items()}
                    if res["proposal"] is not None:  # none settled: nothing to save
                        session.live.set_mode("pid", res["proposal"])
                        path = gains_io.save(session, "autotuned.yaml")
                        results["autotune"]["saved"] = str(path)
                if step_test:
                    res = experiments.step_test(session, cfg.step_from, cfg.step_to, emit=False)
                    res.pop("trace")
                    results["step_test"] = res
            finally:
                session.close()
            _print(results, as_json)
            return
        assert server_cfg is not None
        server = TuneServer(session, server_cfg)
        print(f"embodied tune: {task.env.env_id} on {server.url}  (Ctrl-C stops)", flush=True)
        if not is_loopback(host) and not serving["allowed_hosts"]:
            print(
                f"note: the page answers only to {host}, 127.0.0.1 and localhost; add "
                "--allow-host NAME for each name or address other machines open it under",
                flush=True,
            )
        server.run()


def _print(results: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(results, indent=2, default=str))
        return
    if "autotune" in results:
        at = results["autotune"]
        start = "n/a" if at["baseline_score"] is None else f"{at['baseline_score']:.4f}"
        if at["proposal"] is None:
            print(
                f"auto-tune: no gains settled within {at['max_overshoot_pct']:g} % overshoot in "
                f"{len(at['candidates'])} step tests; nothing saved"
            )
        else:
            print(
                f"auto-tune: proposal {at['proposal']} score {at['score']:.4f} (start gains "
                f"{start}), {len(at['candidates'])} step tests -> {at['saved']}"
            )
    if "step_test" in results:
        r = results["step_test"]

        def f(v: Any, unit: str) -> str:
            return "n/a (not reached)" if v is None else f"{v:.3f}{unit}"

        print(f"step {r['from']} -> {r['to']} ({r['mode']} {r['params']}):")
        print(
            f"  start settled {r['start_settled']} (band {r['settle_band_pct']:g} %, dwell {r['dwell_s']} s)"
        )
        print(f"  rise time     {f(r['rise_time_s'], ' s')} (10-90 %)")
        print(f"  overshoot     {f(r['overshoot_pct'], ' %')}")
        print(f"  settling time {f(r['settling_time_s'], ' s')} ({r['settle_band_pct']:g} % band)")
        print(
            f"  steady-state error {f(r['steady_state_error'], '')}  IAE {f(r['iae'], '')}  ITAE {f(r['itae'], '')}"
        )
        print(f"  IAE/step {r['iae_norm']:.4f}  success={r['success']}  steps={r['steps']}")
