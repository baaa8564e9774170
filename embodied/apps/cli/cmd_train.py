"""Train policies from datasets (resumable; TensorBoard logs in OUT/tb)."""

# One command per policy family; a new family is a new command here.

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
import typer

from embodied.apps.cli._config_options import Opt, config_options
from embodied.apps.cli._steer import log, steer_env
from embodied.apps.experiments.steer import train_tiny_on_env
from embodied.distributed import Distributed
from policies.diffusion.configuration_pdp import PDPConfig
from policies.diffusion.training_pdp import train_pdp
from policies.openvla.training_openvla import BCSettings

train_app = typer.Typer(help=__doc__, no_args_is_help=True)


@train_app.command("pdp")
@config_options(
    PDPConfig,
    *(
        Opt(name, given_only=True)  # on --resume only the given ones override (steps)
        for name in ("steps", "manifold.steps", "z_dim", "denoiser", "hidden_dim", "horizon")
    ),
    *(Opt(name, given_only=True) for name in ("n_action_steps", "n_obs_steps", "batch_size", "lr")),
    "seed",
)
def train_pdp_cmd(
    data: Path = typer.Option(..., "--data", help="Dataset folder (embodied collect) or .hdf5."),
    out: Path = typer.Option(..., "--out", help="Checkpoint folder to write."),
    exclude_state: str | None = typer.Option(
        None, help="State dims hidden from the denoiser, e.g. vel_x,vel_y (copycat guard)."
    ),
    checkpoint_every: int = typer.Option(500, help="Steps between resumable checkpoints."),
    resume: bool = typer.Option(False, "--resume", help="Continue from OUT/train_state.json."),
    budget_s: float = typer.Option(0.0, help="Stop after this many seconds (0 = no limit)."),
    threads: int = typer.Option(1, help="torch CPU threads."),
    no_progress: bool = typer.Option(False, "--no-progress", help="Hide the progress bar."),
    *,
    config: dict[str, Any],
) -> None:
    """Train a Parameterized Diffusion Policy (manifold VAE, then z-conditioned diffusion)."""
    torch.set_num_threads(threads)
    overrides: dict[str, object] = dict(config)  # PDPConfig fields, "manifold.steps" nested
    if exclude_state:
        overrides["obs_exclude"] = [s.strip() for s in exclude_state.split(",") if s.strip()]
    result = train_pdp(
        data,
        out,
        PDPConfig(),
        overrides=overrides,
        resume=resume,
        checkpoint_every=checkpoint_every,
        progress=not no_progress,
        budget_s=budget_s or None,
    )
    if int(os.environ.get("RANK", "0") or 0) != 0:
        return  # under torchrun / accelerate launch only the main process prints its result
    print(
        json.dumps(
            {
                "out": str(result.out_dir),
                "steps": result.steps,
                "final_loss": None if result.final_loss != result.final_loss else result.final_loss,
                "seconds": round(result.seconds, 1),
            }
        )
    )


@train_app.command("vla")
def train_vla_cmd(
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
    torch.set_num_threads(1)
    dist = Distributed.from_env(find_unused_parameters=True)  # last vision layers are unused
    main_log = log if dist.is_main else (lambda msg: None)
    bc = BCSettings(steps=steps, batch_size=batch_size, lr=lr, log_every=max(1, steps // 8))
    dist.shard(batch_size)  # a batch that does not split over the processes fails now
    env, reset, targets = steer_env(env_id, image_size, layout)
    *_, history = train_tiny_on_env(
        env, out, demo_episodes, bc, reset, targets, seed=0, log=main_log, dist=dist,
        text={"num_hidden_layers": llm_layers},
    )  # fmt: skip
    if dist.is_main:
        print(json.dumps({"checkpoint": str(out), "final_loss": history[-1]["loss"]}))
    dist.close()


def register(app: typer.Typer) -> None:
    """Add the ``train`` command group to ``app``."""
    app.add_typer(train_app, name="train")
