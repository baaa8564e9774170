"""Activation steering of VLAs: extract directions, run experiments.

`embodied steer experiment` compares open- and closed-loop steering; without
`--model` it first trains the tiny VLA on the built-in arm task, with `--model
openvla/openvla-7b --env libero:...` it steers the real model on a GPU. The
tiny VLA alone is trained by `embodied train vla`. `embodied steer reference` runs the
same controllers on the scripted speed-knob plant (no VLA): no control vs fixed alpha vs PID
(vs RL).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch
import typer

from embodied.apps.cli._steer import log, steer_env
from embodied.apps.experiments import controllers as reference_comparison
from embodied.apps.experiments.steer import (
    ExperimentSettings,
    collect_speed_demos,
    demos_from_dataset,
    extract_intervention,
    run_experiment,
    train_tiny_on_env,
)
from embodied.apps.experiments.steer_report import markdown_table
from embodied.errors import ConfigError
from embodied.io import write_json
from policies.openvla.loading_openvla import load_pretrained
from policies.openvla.policy_openvla import OpenVLAPolicy
from policies.openvla.steering import load_intervention
from policies.openvla.training_openvla import BCSettings

steer_app = typer.Typer(help=__doc__, no_args_is_help=True)


def _train(
    env: Any,
    out: Path,
    demo_episodes: int,
    steps: int,
    batch: int,
    lr: float,
    reset: dict[str, Any],
    targets: list[str],
    llm_layers: int = 4,
) -> Any:
    bc = BCSettings(steps=steps, batch_size=batch, lr=lr, log_every=max(1, steps // 8))
    return train_tiny_on_env(
        env,
        out,
        demo_episodes,
        bc,
        reset,
        targets,
        log=log,
        text={"num_hidden_layers": llm_layers},
    )


@steer_app.command("extract")
def extract_cmd(
    model: Path = typer.Option(..., "--model", help="OpenVLA checkpoint folder or hub id."),
    out: Path = typer.Option(..., "--out", help="Output stem (writes .safetensors + .json)."),
    env_id: str = typer.Option("mujoco:arm_reach", "--env", help="Env for fresh expert demos."),
    dataset: Path | None = typer.Option(None, help="Recorded demos instead of fresh ones."),
    image_key: str = typer.Option("image.front", help="Camera key in the dataset."),
    kind: str = typer.Option("direction", help="direction | neurons."),
    layer: int | None = typer.Option(None, help="Decoder layer (default: middle)."),
    demo_episodes: int = typer.Option(1, help="Fresh demo episodes per (level, target)."),
    layout: str = typer.Option("fixed", help="arm_reach cube layout: fixed | random."),
    unnorm_key: str | None = typer.Option(None, help="Dataset statistics key."),
    positions: str = typer.Option("last", help="Contrast positions: last | action | text."),
    neurons: int = typer.Option(64, help="Neurons in a neuron cluster."),
) -> None:
    """Difference-of-means speed direction (fast vs slow demo steps) or a neuron cluster."""
    torch.set_num_threads(1)
    m, proc = load_pretrained(str(model))
    if dataset is not None:
        demos = demos_from_dataset(str(dataset), image_key)
    else:
        env, reset, targets = steer_env(env_id, m.config.image_size, layout)
        demos = collect_speed_demos(env, demo_episodes, 0, None, reset, targets, log)
    inter = extract_intervention(
        m, proc, demos, layer, kind, neurons=neurons, unnorm_key=unnorm_key, positions=positions
    )
    path = inter.save(out)
    print(json.dumps({"path": str(path), "layer": inter.layer, "meta": inter.meta}))


@steer_app.command("experiment")
def experiment_cmd(
    env_id: str = typer.Option("mujoco:arm_reach", "--env", help="Env id (libero:... on a GPU)."),
    model: str | None = typer.Option(None, "--model", help="Checkpoint/hub id; none = train tiny."),
    out: Path = typer.Option(Path("runs/steer_experiment"), "--out", help="Output folder."),
    direction: Path | None = typer.Option(
        None, help="Saved direction (else extracted from demos)."
    ),
    dataset: Path | None = typer.Option(None, help="Demos for extraction (LIBERO: required)."),
    image_key: str = typer.Option("image.front", help="Camera key in --dataset."),
    kind: str = typer.Option("direction", help="direction | neurons (fixed-alpha baseline)."),
    layer: int | None = typer.Option(None, help="Decoder layer to steer (default: (n-1)//2)."),
    positions: str = typer.Option("last", help="Contrast positions: last | action | text."),
    neurons: int = typer.Option(64, help="Neurons in a neuron cluster (--kind neurons)."),
    llm_layers: int = typer.Option(4, help="Tiny model: Llama decoder layers."),
    unnorm_key: str | None = typer.Option(None, help="Dataset statistics key of --model."),
    setpoint: float = typer.Option(0.06, help="Target end-effector speed (m/s)."),
    episodes: int = typer.Option(12, help="Evaluation episodes per controller."),
    alpha_weak: float = typer.Option(-0.5, help="Weak fixed alpha."),
    alpha_strong: float = typer.Option(-4.0, help="Strong fixed alpha."),
    alpha_limit: float = typer.Option(4.0, help="Knob / controller output limit (+/-)."),
    sweep_episodes: int = typer.Option(3, help="Episodes per fixed-alpha sweep point (0 = skip)."),
    rl_timesteps: int = typer.Option(2048, help="PPO timesteps (0 = no RL row)."),
    sweep_alphas: str = typer.Option("-4,-2,-1,-0.5,-0.25,0", help="Fixed alphas of the sweep."),
    pid_kp: float | None = typer.Option(None, help="PID kp (default: from the sweep)."),
    pid_ki: float | None = typer.Option(None, help="PID ki (1/s)."),
    demo_episodes: int = typer.Option(2, help="Tiny model: demo episodes per (level, target)."),
    train_steps: int = typer.Option(500, help="Tiny model: BC steps."),
    retrain: bool = typer.Option(False, help="Retrain even if OUT/vla exists."),
    layout: str = typer.Option("fixed", help="arm_reach cube layout: fixed | random."),
    image_size: int = typer.Option(64, help="Camera size (mujoco envs)."),
) -> None:
    """No steering vs fixed alpha (weak/strong) vs PID vs RL: tracking, overshoot, success."""
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    env, reset, targets = steer_env(env_id, image_size, layout)
    demos = None
    if model is None:
        vla_dir = out / "vla"
        if (vla_dir / "config.json").exists() and not retrain:
            log(f"reusing {vla_dir} (pass --retrain to train again)")
            m, proc = load_pretrained(vla_dir, device="cpu")
        else:
            m, proc, demos, _ = _train(
                env, vla_dir, demo_episodes, train_steps, 16, 2e-3, reset, targets
            )
        model_name = str(vla_dir)
    else:
        m, proc = load_pretrained(model, center_crop=env_id.startswith("libero") or None)
        model_name = model
    if direction is not None:
        inter = load_intervention(direction)
    else:
        if dataset is not None:
            demos = demos_from_dataset(str(dataset), image_key)
        elif demos is None:
            if not env_id.startswith("mujoco:"):
                raise ConfigError(
                    f"no demos to extract a direction for {env_id!r}",
                    fix="pass --direction or --dataset (e.g. a LIBERO hdf5)",
                )
            demos = collect_speed_demos(env, 1, 0, None, reset, targets, log)
        inter = extract_intervention(
            m, proc, demos, layer, kind, neurons=neurons, unnorm_key=unnorm_key, positions=positions
        )
        inter.save(out / f"speed_{kind}")
        log(f"{kind} at layer {inter.layer}: {json.dumps(inter.meta)[:300]}")
    policy = OpenVLAPolicy(
        m,
        proc,
        unnorm_key=unnorm_key,
        intervention=inter,
        alpha_limit=alpha_limit,
        flip_image=env_id.startswith("libero"),
    )
    pid: dict[str, Any] = {}
    if pid_kp is not None or pid_ki is not None:
        pid = {
            "kp": pid_kp or 0.0,
            "ki": pid_ki or 0.0,
            "output_min": -alpha_limit,
            "output_max": alpha_limit,
            "anti_windup": "back_calculation",
        }
    settings = ExperimentSettings(
        setpoint=setpoint,
        episodes=episodes,
        alpha_weak=alpha_weak,
        alpha_strong=alpha_strong,
        alpha_limit=alpha_limit,
        sweep_episodes=sweep_episodes,
        sweep_alphas=tuple(float(a) for a in sweep_alphas.split(",") if a.strip())
        if sweep_episodes > 0
        else (),
        pid=pid,
        rl_timesteps=rl_timesteps,
        reset_options=reset,
    )
    report = run_experiment(
        env,
        policy,
        settings,
        out,
        log,
        extra={
            "model": model_name,
            "env_id": env_id,
            "intervention": {"kind": kind, "layer": inter.layer, "meta": inter.meta},
        },
    )
    report["wall_seconds"] = round(time.perf_counter() - t0, 1)
    write_json(out / "results.json", report)
    print(markdown_table(report))
    print(f"wrote {out / 'results.json'}, {out / 'results.md'}, {out / 'speed_alpha.png'}")


@steer_app.command("reference")
def reference_cmd(
    out: Path = typer.Option(Path("runs/ctrl_reference"), "--out", help="Output folder."),
    rl: Path | None = typer.Option(None, "--rl", help="Folder of a trained RL controller."),
    train_rl: int = typer.Option(0, "--train-rl", help="Train an RL controller for N steps first."),
    seeds: int = typer.Option(5, "--seeds", help="Episodes per controller."),
) -> None:
    """Closed loop on the scripted speed-knob plant: no control vs fixed alpha vs PID (vs RL)."""
    table = reference_comparison.run(out, rl_path=rl, train_rl_steps=train_rl, seeds=seeds)
    print(reference_comparison.format_table(table))
    print(f"wrote {out / 'table.json'} and {out / 'tracking.png'}")


def register(app: typer.Typer) -> None:
    """Add the ``steer`` command group to ``app``."""
    app.add_typer(steer_app, name="steer")
