"""Train policies from datasets (resumable; TensorBoard logs in OUT/tb)."""

# One command per policy family; a new family is a new command here.

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import typer

# Only light modules at the top: `embodied train --help` builds every option from the config
# dataclasses without importing torch; each command imports its training code when it runs.
from embodied.apps.cli._common import parse_kv
from embodied.apps.cli._config_options import Opt, config_options
from embodied.apps.training.config_minijudge import DEVELOPMENT_MIN_TNR, MiniJudgeTrainConfig
from embodied.apps.training.config_vla import TinyVLAConfig
from embodied.apps.training.selection_pdp import (
    DEVELOPMENT_SEED,
    SelectConfig,
    select_snapshot,
    trained_env_kwargs,
)
from embodied.errors import ConfigError
from embodied.io import require_output_dir, write_json
from policies.diffusion.configuration_pdp import PDPConfig, TrainSpeedConfig
from policies.openvla.configuration_openvla import BCSettings
from sim.libero import demonstration_files as libero_demonstration_files
from sim.libero import load_demonstrations as load_libero_demonstrations

train_app = typer.Typer(help=__doc__, no_args_is_help=True)


@train_app.command("pdp")
@config_options(
    TrainSpeedConfig, *(f.name for f in dataclasses.fields(TrainSpeedConfig)), into="speed"
)
@config_options(
    PDPConfig,
    *(
        Opt(name, given_only=True)  # on --resume only the given ones override (steps)
        for name in (
            "variant",
            "action_space",
            "steps",
            "manifold.steps",
            "manifold.epochs",
            "z_dim",
            "denoiser",
            "hidden_dim",
            "horizon",
        )
    ),
    *(
        Opt(name, given_only=True)
        for name in (
            "n_action_steps",
            "n_obs_steps",
            "batch_size",
            "lr",
            "cond_dim",
            "num_inference_steps",
        )
    ),
    *(
        Opt(name, flag=flag, given_only=True)
        for name, flag in (
            ("vision.cameras", "--cameras"),
            ("vision.text_model", "--text-model"),
            ("vision.crop_shape", "--crop-shape"),
            ("vision.backbone_width", "--backbone-width"),
            ("vision.backbone_stages", "--backbone-stages"),
            ("vision.use_separate_rgb_encoder_per_camera", "--separate-camera-encoders"),
            ("vision.language_film", "--language-film"),
        )
    ),
    "seed",
)
def train_pdp_cmd(
    data: Path = typer.Option(
        ...,
        "--data",
        help="Dataset: an embodied collect folder, a robomimic or LIBERO .hdf5, a LeRobotDataset v3 folder.",
    ),
    out: Path = typer.Option(..., "--out", help="Checkpoint folder to write."),
    exclude_state: str | None = typer.Option(
        None, help="State dims hidden from the denoiser, e.g. vel_x,vel_y (copycat guard)."
    ),
    checkpoint_every: int = typer.Option(500, help="Steps between resumable checkpoints."),
    resume: bool = typer.Option(False, "--resume", help="Continue from OUT/train_state.json."),
    budget_s: float = typer.Option(0.0, help="Stop after this many seconds (0 = no limit)."),
    snapshot_every_s: float = typer.Option(
        0.0,
        help="Keep the EMA policy every this many seconds of training (OUT/snapshots/; "
        "0 = none), for `embodied train pdp-select`.",
    ),
    threads: int = typer.Option(0, help="torch CPU threads (0 = one per core)."),
    no_progress: bool = typer.Option(False, "--no-progress", help="Hide the progress bar."),
    *,
    config: dict[str, Any],
    speed: dict[str, Any],
) -> None:
    """Train a Parameterized Diffusion Policy (manifold VAE, then z-conditioned diffusion)."""
    require_output_dir(out)
    if config.get("steps") == 0 and not resume:
        raise ConfigError(
            "--steps 0 would write an untrained policy",
            fix="pass --steps >= 1 (e.g. 10000); to re-save a run use --resume",
        )
    import torch

    from policies.diffusion.training_pdp import train_pdp

    if threads:
        torch.set_num_threads(threads)
    overrides: dict[str, object] = dict(config)  # PDPConfig fields, "manifold.steps" nested
    if exclude_state:
        overrides["obs_exclude"] = [s.strip() for s in exclude_state.split(",") if s.strip()]
    dataset: Any = data
    libero_files = libero_demonstration_files(data)
    if libero_files:  # LIBERO's keys -> ours (state, image.<camera>)
        dataset = load_libero_demonstrations(data, files=libero_files)
    result = train_pdp(
        dataset,
        out,
        PDPConfig(),
        overrides=overrides,
        resume=resume,
        checkpoint_every=checkpoint_every,
        progress=not no_progress,
        budget_s=budget_s or None,
        speed=TrainSpeedConfig(**speed),
        snapshot_every_s=snapshot_every_s or None,
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


@train_app.command("pdp-select")
def select_pdp_cmd(
    run: Path = typer.Argument(..., help="Training run folder (train pdp --snapshot-every-s)."),
    env: str = typer.Option("libero:libero_object", "--env", help="Env or suite of the scenes."),
    episodes: int = typer.Option(3, "--episodes", help="Development episodes per task."),
    seed: int = typer.Option(
        DEVELOPMENT_SEED, "--seed", help="First placement seed (apart from the training data's)."
    ),
    workers: int = typer.Option(1, "--workers", help="Evaluation worker processes."),
    cameras: str = typer.Option(
        "",
        "--cameras",
        help="LIBERO cameras, comma-separated (default: the cameras the run trained on).",
    ),
    env_arg: list[str] = typer.Option(
        [],
        "--env-arg",
        help="Env option key=value for every env family (repeatable; LIBERO's render_size "
        "defaults to the run's training image size).",
    ),
    min_step: int = typer.Option(
        0, "--min-step", help="Evaluate only snapshots from this training step on."
    ),
) -> None:
    """Choose a DP checkpoint on development scenes (sampled placements, never LIBERO's fixed
    init states): evaluates every snapshot once, writes RUN/selection/curve.{json,png} (success
    against training wall time) and copies the best snapshot to RUN/best."""
    try:
        common = parse_kv(env_arg, "--env-arg", "render_size=84")
        libero = {**trained_env_kwargs(run), **common}
    except ConfigError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if cameras:
        libero["cameras"] = tuple(c for c in cameras.split(",") if c)
    env_kwargs = {"mujoco": dict(common), "libero": libero}
    try:
        cfg = SelectConfig(str(run), env, episodes, seed, workers, env_kwargs, min_step=min_step)
    except ConfigError as exc:
        raise typer.BadParameter(str(exc)) from exc
    summary = select_snapshot(cfg)
    for row in summary["curve"]:
        print(
            f"{row['snapshot']}: {row['train_seconds'] / 60:.1f} min, "
            f"{row['successes']}/{row['n']} [{100 * row['ci_low']:.1f}, {100 * row['ci_high']:.1f}] %"
        )
    print(f"chosen: {summary['chosen']} -> {run / 'best'}")


@train_app.command("vla")
@config_options(
    BCSettings,
    Opt("steps", default=500),
    Opt("batch_size", default=16),
    Opt("lr", default=2e-3),
    into="bc",
)
@config_options(
    TinyVLAConfig,
    Opt("env_id", flag="--env"),
    "demonstration_episodes",
    "layout",
    "jitter",
    "image_size",
    "llm_layers",
    "action_bounds",
)
def train_vla_cmd(
    out: Path = typer.Option(Path("runs/vla_tiny"), "--out", help="Checkpoint folder."),
    *,
    config: dict[str, Any],
    bc: dict[str, Any],
) -> None:
    """Behaviour-clone a tiny OpenVLA (same classes as openvla-7b) on speed-varied
    demonstrations.

    Runs data-parallel unchanged under ``torchrun --nproc-per-node N -m embodied train vla``
    or ``accelerate launch``: ``--batch-size`` is the global batch (split over the
    processes), only the main process logs, writes the checkpoint and prints.
    """
    import torch

    from embodied.apps.cli._common import log
    from embodied.apps.training.training_vla import steer_env, train_tiny_on_env
    from embodied.distributed import Distributed

    torch.set_num_threads(1)
    settings = BCSettings(**bc, log_every=max(1, bc["steps"] // 8))
    cfg = TinyVLAConfig(**config)
    # the last vision layers are unused: DDP must not wait for their gradients
    with Distributed.from_env(find_unused_parameters=True) as dist:
        dist.shard(settings.batch_size)  # a batch that does not split fails before any work
        env, reset, targets = steer_env(cfg.env_id, cfg.image_size, cfg.layout, cfg.jitter)
        *_, history = train_tiny_on_env(
            env, out, cfg.demonstration_episodes, settings, reset, targets, seed=0,
            log=log if dist.is_main else (lambda msg: None), dist=dist,
            text={"num_hidden_layers": cfg.llm_layers}, action_bounds=cfg.action_bounds,
        )  # fmt: skip
        if dist.is_main:
            print(json.dumps({"checkpoint": str(out), "final_loss": history[-1]["loss"]}))


@train_app.command("minijudge")
@config_options(MiniJudgeTrainConfig, *(f.name for f in dataclasses.fields(MiniJudgeTrainConfig)))
def train_minijudge_cmd(
    resume: bool = typer.Option(
        False, "--resume", help="Continue from OUT/train_state.json (the same options)."
    ),
    *,
    config: dict[str, Any],
) -> None:
    """Train and calibrate the small judge (minijudge) on rendered MuJoCo episodes.

    With --init DIR --steps 0 it recalibrates DIR's weights unchanged. OUT/calibration.json
    records this command line, the resolved options and the reset seeds of every split.
    A run killed part-way continues with the same command plus --resume.
    """
    try:
        judge_config = MiniJudgeTrainConfig(**config)
    except ConfigError as exc:  # a bad option value is a usage error (exit 2)
        raise typer.BadParameter(str(exc)) from exc
    from embodied.apps.training.training_minijudge import train_minijudge

    calibration = train_minijudge(judge_config, resume=resume)
    summary = {"out": judge_config.out, "threshold": calibration["threshold"]}
    print(json.dumps({**summary, "oracle_agreement": calibration["oracle_agreement"]}))


@train_app.command("minijudge-select")
def select_minijudge_cmd(
    checkpoints: list[Path] = typer.Argument(..., help="Candidate checkpoint folders."),
    cache: Path = typer.Option(None, "--cache", help="Keep the recorded episodes here."),
    out: Path = typer.Option(None, "--out", help="Write the comparison JSON here (atomic)."),
    threads: int = typer.Option(1, "--threads", min=1, help="torch CPU threads."),
    min_tnr: float = typer.Option(
        DEVELOPMENT_MIN_TNR,
        "--min-tnr",
        help="Candidates must keep this TNR (percent) on every task's development frames.",
    ),
) -> None:
    """Choose among minijudge candidates on development episodes (reset seeds 70000+).

    Candidates are compared at their own thresholds on arrival frames of development episodes
    that no candidate was trained, calibrated or reported on; the report split is never read,
    so the chosen checkpoint's calibration.json figures stay held out.
    """
    import torch

    from embodied.apps.training.training_minijudge import select_minijudge

    torch.set_num_threads(threads)
    try:
        cache_dir = None if cache is None else str(cache)
        result = select_minijudge(checkpoints, cache_dir, min_tnr=min_tnr)
    except ConfigError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if out is not None:
        write_json(out, result)
    for row in result["candidates"]:
        print(
            f"{row['checkpoint']}: threshold {row['threshold']:.3f}, arrival frames missed "
            f"{row['arrival_missed']}, worst TNR {row['worst_tnr']:.2f} %"
        )
    print(f"chosen: {result['chosen']}")


def register(app: typer.Typer) -> None:
    """Add the ``train`` command group to ``app``."""
    app.add_typer(train_app, name="train")
