"""``embodied steer``: activation steering of VLAs (CTRL-STEER).

* ``embodied steer experiment`` - the open- vs closed-loop steering comparison (trains the
  tiny VLA on the built-in arm task when no ``--model`` is given; with ``--model
  openvla/openvla-7b --env libero:...`` it steers the real model on a GPU).
* ``embodied steer extract`` - a speed direction (or neuron cluster) from demos.
* ``embodied train vla`` (or ``embodied steer train`` if the train group is absent) -
  behaviour cloning of a tiny OpenVLA on speed-varied demos.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

steer_app = typer.Typer(
    help="Activation steering of VLAs: extract directions, run experiments.", no_args_is_help=True
)


def _log(msg: str) -> None:
    from rich.console import Console

    Console(stderr=True).print(msg, highlight=False)


def _env(env_id: str, image_size: int | None, layout: str) -> tuple[Any, dict[str, Any], list[str]]:
    import sim

    kwargs: dict[str, Any] = {}
    if env_id.startswith("mujoco:") and image_size:
        kwargs["image_size"] = image_size
    env = sim.make(env_id, **kwargs)
    reset: dict[str, Any] = {}
    targets: list[str] = []
    if env_id == "mujoco:arm_reach":
        from sim.mujoco.arm_reach import COLORS

        targets = list(COLORS)
        if layout == "fixed":
            from embodied.apps.experiments.steer import FIXED_LAYOUT

            reset["cubes"] = {k: list(v) for k, v in FIXED_LAYOUT.items()}
        elif layout != "random":
            from embodied.errors import ConfigError

            raise ConfigError(f"unknown --layout {layout!r}", fix="use 'fixed' or 'random'")
    return env, reset, targets


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
    from embodied.apps.experiments.steer import train_tiny_on_env
    from policies.openvla.training_openvla import BCSettings

    bc = BCSettings(steps=steps, batch_size=batch, lr=lr, log_every=max(1, steps // 8))
    return train_tiny_on_env(
        env,
        out,
        demo_episodes,
        bc,
        reset,
        targets,
        log=_log,
        text={"num_hidden_layers": llm_layers},
    )


def _train_vla_command(
    env_id: str = typer.Option(
        "mujoco:arm_reach", "--env", help="Env with a camera and an expert."
    ),
    out: Path = typer.Option(Path("runs/vla_tiny"), "--out", help="Checkpoint folder."),
    demo_episodes: int = typer.Option(2, help="Demo episodes per (speed level, target)."),
    steps: int = typer.Option(500, help="BC optimiser steps."),
    batch_size: int = typer.Option(16, help="BC batch size."),
    lr: float = typer.Option(2e-3, help="Peak learning rate."),
    layout: str = typer.Option("fixed", help="arm_reach cube layout: fixed | random."),
    image_size: int = typer.Option(64, help="Camera size in pixels (mujoco envs)."),
    llm_layers: int = typer.Option(4, help="Llama decoder layers of the tiny model."),
) -> None:
    """Behaviour-clone a tiny OpenVLA (same classes as openvla-7b) on speed-varied demos.

    Runs data-parallel unchanged under ``torchrun --nproc-per-node N -m embodied train vla``
    or ``accelerate launch``: ``--batch-size`` is the global batch (split over the
    processes), only the main process logs, writes the checkpoint and prints.
    """
    import torch

    from embodied.apps.experiments.steer import train_tiny_on_env
    from embodied.distributed import Distributed
    from policies.openvla.training_openvla import BCSettings

    torch.set_num_threads(1)
    dist = Distributed.from_env(find_unused_parameters=True)  # last vision layers are unused
    log = _log if dist.is_main else (lambda msg: None)
    bc = BCSettings(steps=steps, batch_size=batch_size, lr=lr, log_every=max(1, steps // 8))
    dist.shard(batch_size)  # a batch that does not split over the processes fails now
    env, reset, targets = _env(env_id, image_size, layout)
    *_, history = train_tiny_on_env(
        env, out, demo_episodes, bc, reset, targets, seed=0, log=log, dist=dist,
        text={"num_hidden_layers": llm_layers},
    )  # fmt: skip
    if dist.is_main:
        print(json.dumps({"checkpoint": str(out), "final_loss": history[-1]["loss"]}))
    dist.close()


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
    import torch

    from embodied.apps.experiments.steer import (
        collect_speed_demos,
        demos_from_dataset,
        extract_intervention,
    )
    from policies.openvla.loading_openvla import load_pretrained

    torch.set_num_threads(1)
    m, proc = load_pretrained(str(model))
    if dataset is not None:
        demos = demos_from_dataset(str(dataset), image_key)
    else:
        env, reset, targets = _env(env_id, m.config.image_size, layout)
        demos = collect_speed_demos(env, demo_episodes, 0, None, reset, targets, _log)
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
    import time

    import torch

    from embodied.apps.experiments.steer import (
        ExperimentSettings,
        collect_speed_demos,
        demos_from_dataset,
        extract_intervention,
        run_experiment,
    )
    from embodied.apps.experiments.steer_report import markdown_table
    from policies.openvla.loading_openvla import load_pretrained
    from policies.openvla.policy_openvla import OpenVLAPolicy
    from policies.openvla.steering import load_intervention

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    env, reset, targets = _env(env_id, image_size, layout)
    demos = None
    if model is None:
        vla_dir = out / "vla"
        if (vla_dir / "config.json").exists() and not retrain:
            _log(f"reusing {vla_dir} (pass --retrain to train again)")
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
                from embodied.errors import ConfigError

                raise ConfigError(
                    f"no demos to extract a direction for {env_id!r}",
                    fix="pass --direction or --dataset (e.g. a LIBERO hdf5)",
                )
            demos = collect_speed_demos(env, 1, 0, None, reset, targets, _log)
        inter = extract_intervention(
            m, proc, demos, layer, kind, neurons=neurons, unnorm_key=unnorm_key, positions=positions
        )
        inter.save(out / f"speed_{kind}")
        _log(f"{kind} at layer {inter.layer}: {json.dumps(inter.meta)[:300]}")
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
        _log,
        extra={
            "model": model_name,
            "env_id": env_id,
            "intervention": {"kind": kind, "layer": inter.layer, "meta": inter.meta},
        },
    )
    report["wall_seconds"] = round(time.perf_counter() - t0, 1)
    from embodied.io import write_json

    write_json(out / "results.json", report)
    print(markdown_table(report))
    print(f"wrote {out / 'results.json'}, {out / 'results.md'}, {out / 'speed_alpha.png'}")


def register(app: typer.Typer) -> None:
    """Add ``steer`` (and ``train vla`` to the train group when it exists)."""
    app.add_typer(steer_app, name="steer")
    try:
        from embodied.apps.cli.cmd_train import train_app
    except ImportError:
        steer_app.command("train")(_train_vla_command)
    else:
        if "vla" not in {c.name for c in train_app.registered_commands}:
            train_app.command("vla")(_train_vla_command)
