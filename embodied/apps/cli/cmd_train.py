"""Train policies from datasets (resumable; TensorBoard logs in OUT/tb)."""

# One command per policy family; a new family is a new command here.

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import typer

from embodied.apps.cli._steer import log, steer_env
from embodied.apps.experiments.steer import train_tiny_on_env
from embodied.distributed import Distributed
from policies.diffusion.configuration_pdp import PDPConfig
from policies.diffusion.training_pdp import train_pdp
from policies.openvla.training_openvla import BCSettings

train_app = typer.Typer(help=__doc__, no_args_is_help=True)


@train_app.command("pdp")
def train_pdp_cmd(
    data: Path = typer.Option(..., "--data", help="Dataset folder (embodied collect) or .hdf5."),
    out: Path = typer.Option(..., "--out", help="Checkpoint folder to write."),
    steps: int | None = typer.Option(None, help="Diffusion training steps [config: 3000]."),
    manifold_steps: int | None = typer.Option(
        None, help="Trajectory-VAE (manifold) training steps [config: 400]."
    ),
    z_dim: int | None = typer.Option(None, help="Behaviour latent size; 0 = plain DP [2]."),
    denoiser: str | None = typer.Option(None, help="mlp (residual MLP) or unet (1D conv) [mlp]."),
    hidden_dim: int | None = typer.Option(None, help="Residual-MLP width [128]."),
    horizon: int | None = typer.Option(None, help="Predicted action chunk length [8]."),
    n_action_steps: int | None = typer.Option(None, help="Executed actions per chunk [4]."),
    n_obs_steps: int | None = typer.Option(None, help="Observation history length [2]."),
    batch_size: int | None = typer.Option(None, help="Windows per batch [128]."),
    lr: float | None = typer.Option(None, help="AdamW learning rate [2e-3]."),
    exclude_state: str | None = typer.Option(
        None, help="State dims hidden from the denoiser, e.g. vel_x,vel_y (copycat guard)."
    ),
    seed: int = typer.Option(0, help="Training seed."),
    checkpoint_every: int = typer.Option(500, help="Steps between resumable checkpoints."),
    resume: bool = typer.Option(False, "--resume", help="Continue from OUT/train_state.json."),
    budget_s: float = typer.Option(0.0, help="Stop after this many seconds (0 = no limit)."),
    threads: int = typer.Option(1, help="torch CPU threads."),
    no_progress: bool = typer.Option(False, "--no-progress", help="Hide the progress bar."),
) -> None:
    """Train a Parameterized Diffusion Policy (manifold VAE, then z-conditioned diffusion)."""
    torch.set_num_threads(threads)
    given = {
        "steps": steps,
        "z_dim": z_dim,
        "denoiser": denoiser,
        "hidden_dim": hidden_dim,
        "horizon": horizon,
        "n_action_steps": n_action_steps,
        "n_obs_steps": n_obs_steps,
        "batch_size": batch_size,
        "lr": lr,
        "seed": seed,
        "manifold.steps": manifold_steps,
    }
    overrides: dict[str, object] = {k: v for k, v in given.items() if v is not None}
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
