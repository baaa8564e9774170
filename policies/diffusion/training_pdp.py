"""Training PDP: manifold (trajectory VAE), then the z-conditioned diffusion policy.

``train_pdp`` writes into one output folder:

* ``config.json`` + ``model.safetensors`` - the current EMA policy (always loadable);
* ``train_state.json`` + ``train_state_<step>.safetensors`` - raw weights, EMA weights,
  AdamW moments, RNG state and the demonstration latents; the JSON (written last, atomically)
  names the tensor file, so a kill at any moment leaves the previous complete checkpoint;
* ``tb/`` - TensorBoard scalars;
* ``snapshots/step_<step>/`` - with ``snapshot_every_s``, the EMA policy every so many
  seconds of training wall time (and at the end), each a loadable checkpoint with
  ``snapshot.json`` (step, training seconds): the learning curve's points, from which a
  checkpoint is chosen on development scenes (``embodied train pdp-select``).

``resume=True`` continues from the last checkpoint: at most ``checkpoint_every`` steps are
redone after a kill.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save_file

from embodied.datasets import EpisodeData
from embodied.distributed import Distributed, LossModule
from embodied.errors import CheckpointError, ConfigError, DatasetError
from embodied.io import (
    atomic_path,
    build_from_file,
    load_safetensors_file,
    read_json_file,
    remove_stale_temps,
    write_json,
)
from embodied.train_state import optimizer_tensors, restore_optimizer
from policies.diffusion.configuration_pdp import (
    SNAPSHOT_JSON,
    SNAPSHOTS,
    ManifoldConfig,
    PDPConfig,
    TrainSpeedConfig,
)
from policies.diffusion.modeling_manifold import cosine_lr, soft_dtw_divergence_matrix
from policies.diffusion.modeling_pdp import PDPModel
from policies.diffusion.modeling_vision import crop_offsets
from policies.diffusion.policy_pdp import save_model
from policies.diffusion.processor_pdp import (
    Demonstrations,
    ee_paths,
    load_demonstrations,
    policy_windows,
    to_model_space,
    window_frames,
)

STATE_JSON = "train_state.json"
STATE_FIX = (
    "the run's resumable state is damaged: train again without --resume into a new --out "
    "folder (config.json + model.safetensors there still hold the last saved policy)"
)
LATENTS_KEY = "demonstration_latents"
"""Train-state tensor of the training demonstrations' raw latents (N, z_dim)."""
OLD_LATENTS_KEY = "demo_latents"
""":data:`LATENTS_KEY` as train states written before the demo -> demonstration rename name it."""
Logger = Callable[[str, float, int], None]


@dataclass
class TrainResult:
    """What :func:`train_pdp` produced.

    Attributes:
        out_dir: The checkpoint folder (loadable with ``policies.load``).
        steps: Diffusion steps done in total.
        final_loss: Mean denoising loss over the last 50 steps.
        demonstration_latents: (N, z_dim) knob-space latents of the training demonstrations
            (empty for DP).
        labels: Per-demonstration labels (route classes).
        seconds: Wall time of this call.
    """

    out_dir: Path
    steps: int
    final_loss: float
    demonstration_latents: np.ndarray
    labels: list[str]
    seconds: float


def train_manifold(
    model: PDPModel,
    demonstrations: Demonstrations,
    generator: torch.Generator,
    log: Logger | None = None,
    on_step: Callable[[int], None] | None = None,
    deadline: float | None = None,
) -> np.ndarray:
    """Train ``model.manifold`` on whole demonstrations; return encoder means (N, z_dim), raw space.

    ``deadline`` (a ``time.perf_counter()`` value) ends training early, after >= 10 steps.
    """
    assert model.manifold is not None
    mcfg = model.config.manifold
    s, a = model.manifold_inputs(demonstrations.states, demonstrations.actions)
    dims = list(model.config.path_dims or (0, 1))
    if mcfg.architecture == "reference":  # the relative path of the normalised states
        paths = s[:, :, dims].double().numpy()
    else:
        paths = ee_paths(demonstrations, dims, mcfg.path_points)
    dist = torch.as_tensor(soft_dtw_divergence_matrix(paths, mcfg.sdtw_gamma), dtype=torch.float32)
    vae = model.manifold
    vae.train()
    opt = torch.optim.Adam(vae.parameters(), lr=mcfg.lr)
    for step, idx in enumerate(manifold_batches(len(demonstrations), mcfg, generator)):
        if deadline is not None and step >= 10 and time.perf_counter() > deadline:
            break
        if mcfg.architecture == "reference":  # constant lr, no clipping, rolled pairs
            loss, parts = vae.loss(s[idx], a[idx], dist[idx, idx.roll(1)], generator)
            opt.zero_grad(set_to_none=True)
            loss.backward()
        else:
            for g in opt.param_groups:
                g["lr"] = mcfg.lr * cosine_lr(step, mcfg.steps, 20)
            loss, parts = vae.loss(s[idx], a[idx], dist[idx][:, idx], generator)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(vae.parameters(), 1.0)
        opt.step()
        if log is not None and step % 10 == 0:
            for k, v in parts.items():
                log(f"manifold/{k}", v, step)
        if on_step is not None:
            on_step(step)
    vae.eval()
    with torch.no_grad():
        mu, _ = vae.encode(s, a)
    return mu.numpy().astype(np.float64)


def manifold_steps(n: int, config: ManifoldConfig) -> int:
    """Optimiser steps of the manifold's training on ``n`` demonstrations."""
    if config.architecture != "reference":
        return config.steps
    bs = min(config.batch_size, n)
    return config.epochs * (n // bs if n >= config.batch_size else 1)


def manifold_batches(
    n: int, config: ManifoldConfig, generator: torch.Generator
) -> Iterator[torch.Tensor]:
    """Demonstration indices of each manifold step.

    ``reference``: epochs of a shuffled pass in batches, the last partial batch dropped when
    ``n >= batch_size`` (``DataLoader(shuffle=True, drop_last=len(ds) >= batch_size)``).
    ``compact``: ``steps`` random batches.
    """
    bs = min(config.batch_size, n)
    if config.architecture != "reference":
        for _ in range(config.steps):
            yield torch.randperm(n, generator=generator)[:bs]
        return
    for _ in range(config.epochs):
        perm = torch.randperm(n, generator=generator)
        stop = n - n % bs if n >= config.batch_size else n
        for start in range(0, stop, bs):
            yield perm[start : start + bs]


def _match_state_layouts(opt: torch.optim.Optimizer) -> None:
    """Give each optimizer moment its parameter's memory layout.

    Restored moments are contiguous; a channels-last parameter with a contiguous moment is
    updated element by element in the wrong order by the fused Adam kernel (it walks both
    buffers linearly), so a resumed run would silently diverge.
    """
    for group in opt.param_groups:
        for p in group["params"]:
            state = opt.state.get(p, {})
            for key, value in state.items():
                if (
                    torch.is_tensor(value)
                    and value.shape == p.shape
                    and value.stride() != p.stride()
                ):
                    state[key] = torch.empty_like(p).copy_(value)


def _read_train_state(out: Path) -> dict[str, Any]:
    """``train_state.json`` of run ``out``, with its keys checked."""
    path = out / STATE_JSON
    meta: dict[str, Any] = read_json_file(path, what="PDP train state", fix=STATE_FIX)
    expected = {"step": int, "tensors": str, "optimizer": dict, "config": dict}
    bad = [k for k, t in expected.items() if not isinstance(meta.get(k), t)]
    if bad:
        raise CheckpointError(
            f"PDP train state {str(path)!r} lacks or mistypes {bad} "
            f"(expected {', '.join(f'{k}: {expected[k].__name__}' for k in bad)})",
            fix=STATE_FIX,
        )
    return meta


def _read_train_tensors(out: Path, meta: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The tensors file named by ``train_state.json``; it must hold the demonstration latents."""
    path = out / Path(meta["tensors"]).name  # a bare file name: never read outside the run
    if not path.is_file():
        raise CheckpointError(
            f"{str(out / STATE_JSON)!r} points to tensors {path.name!r}, which do not exist",
            fix=STATE_FIX,
        )
    tensors = load_safetensors_file(path, what="PDP train-state tensors", fix=STATE_FIX)
    if OLD_LATENTS_KEY in tensors and LATENTS_KEY not in tensors:  # the one place old runs map
        tensors[LATENTS_KEY] = tensors.pop(OLD_LATENTS_KEY)
    if LATENTS_KEY not in tensors or tensors[LATENTS_KEY].ndim != 2:
        raise CheckpointError(
            f"PDP train-state tensors {str(path)!r} lack a 2-D {LATENTS_KEY!r}", fix=STATE_FIX
        )
    return tensors


def _save_state(
    out: Path,
    step: int,
    model: PDPModel,
    ema: PDPModel,
    opt: torch.optim.Optimizer,
    gen: torch.Generator,
    latents: np.ndarray,
    extra: dict[str, Any],
) -> None:
    """Write one resumable checkpoint; the JSON pointer goes last."""
    tensors = {f"model.{k}": v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    tensors.update(
        {f"ema.{k}": v.detach().clone().contiguous() for k, v in ema.state_dict().items()}
    )
    opt_t, opt_meta = optimizer_tensors(opt)
    tensors.update(opt_t)
    tensors["rng.generator"] = gen.get_state()
    tensors[LATENTS_KEY] = (
        torch.as_tensor(latents, dtype=torch.float32).reshape(len(latents), -1).contiguous()
    )
    name = f"train_state_{step:07d}.safetensors"
    with atomic_path(out / name) as tmp:
        save_file(tensors, str(tmp))
    save_model(ema, out)
    write_json(
        out / STATE_JSON,
        {
            "step": step,
            "tensors": name,
            "optimizer": opt_meta,
            "config": model.config.to_dict(),
            **extra,
        },
    )
    for old in out.glob("train_state_*.safetensors"):
        if old.name != name:
            old.unlink(missing_ok=True)


def save_snapshot(out: Path, step: int, ema: PDPModel, train_seconds: float) -> Path:
    """Write the EMA policy as ``out/snapshots/step_<step>/`` (once; atomic by rename)."""
    folder = out / SNAPSHOTS / f"step_{step:07d}"
    if folder.exists():  # a resumed run passing the same step again
        return folder
    tmp = folder.with_name(f".{folder.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)  # left by a kill during an earlier write
    save_model(ema, tmp)
    write_json(tmp / SNAPSHOT_JSON, {"step": step, "train_seconds": round(train_seconds, 3)})
    tmp.rename(folder)
    return folder


def _obs_dims_without(names: tuple[str, ...], state_dim: int, exclude: Any) -> tuple[int, ...]:
    drop = [exclude] if isinstance(exclude, str) else list(exclude)
    if len(names) != state_dim:
        raise ConfigError(
            f"cannot exclude state dims {drop}: the dataset does not name its state dims",
            fix="collect with `embodied collect` (stores the env spec) or pass obs_dims",
        )
    unknown = [n for n in drop if n not in names]
    if unknown:
        raise ConfigError(
            f"unknown state dims {unknown}; state dims: {list(names)}",
            fix="exclude names from that list",
        )
    return tuple(i for i, n in enumerate(names) if n not in drop)


def _ema_update(ema: PDPModel, model: PDPModel, decay: float) -> None:
    targets: list[torch.Tensor] = list(ema.policy_parameters())
    sources: list[torch.Tensor] = list(model.policy_parameters())
    with torch.no_grad():  # one fused call over all tensors, not a Python loop per parameter
        torch._foreach_lerp_(targets, sources, 1.0 - decay)


def frame_cache(demonstrations: Demonstrations, cameras: Sequence[str]) -> list[torch.Tensor]:
    """Per camera, every demonstration's frames in one (sum T_i, H, W, 3) uint8 tensor.

    Decoded once and held in memory as uint8 (a 500-demonstration LIBERO set at 84 px is
    ~2 GB for two cameras); a batch gathers its rows (:func:`~policies.diffusion.
    processor_pdp.window_frames`) and is cropped before any float conversion.
    """
    return [torch.from_numpy(np.concatenate(demonstrations.images[c])) for c in cameras]


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` computes bf16 natively (AMX / AVX512-BF16 CPUs, bf16 CUDA GPUs)."""
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    if device.type != "cpu":
        return False
    cpu = torch.cpu
    checks = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")
    return any(bool(getattr(cpu, name, lambda: False)()) for name in checks)


def autocast_dtype(speed: TrainSpeedConfig, device: torch.device) -> torch.dtype | None:
    """The camera backbones' compute dtype for ``speed.autocast`` on ``device`` (None: fp32)."""
    if speed.autocast == "bf16" or (speed.autocast == "auto" and native_bf16(device)):
        return torch.bfloat16
    return None


def make_optimizer(
    model: PDPModel, cfg: PDPConfig, speed: TrainSpeedConfig
) -> torch.optim.Optimizer:
    """Adam or AdamW (``cfg.optimizer``) over the policy's parameters, fused if asked."""
    optimizer = torch.optim.Adam if cfg.optimizer == "adam" else torch.optim.AdamW
    kw: dict[str, Any] = {"fused": True} if speed.fused_optimizer else {}
    return optimizer(model.policy_parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, **kw)


def _cameras(
    out: Path, resume: bool, config: PDPConfig | None, overrides: dict[str, Any] | None
) -> tuple[str, ...]:
    """The cameras whose frames training loads (from the resumed run's config, else given)."""
    if resume and (out / STATE_JSON).exists():
        vision = _read_train_state(out)["config"].get("vision", {})
        return tuple(vision.get("cameras", ()))
    given = (overrides or {}).get("vision.cameras")
    if given is not None:
        return (given,) if isinstance(given, str) else tuple(given)
    return tuple((config or PDPConfig()).vision.cameras)


def _text_embeddings(cfg: PDPConfig, demonstrations: Demonstrations) -> torch.Tensor | None:
    """(n_demonstrations, text_dim) frozen sentence embeddings of the instructions."""
    if not cfg.vision.text_model:
        return None
    from embodied.text import TextEncoder

    texts = demonstrations.instructions
    empty = [i for i, t in enumerate(texts) if not t.strip()] if texts else [0]
    if empty:
        raise DatasetError(
            f"language-conditioned training needs an instruction per demonstration; "
            f"demonstration(s) {empty[:5]} have none",
            fix="collect from an env that sets 'instruction' or train without --language",
        )
    emb = TextEncoder(cfg.vision.text_model).encode(texts)
    if emb.shape[1] != cfg.vision.text_dim:
        raise ConfigError(
            f"text encoder {cfg.vision.text_model!r} embeds to {emb.shape[1]} dims but "
            f"vision.text_dim={cfg.vision.text_dim}",
            fix=f"set vision.text_dim={emb.shape[1]}",
        )
    return emb


def train_pdp(
    data: str | os.PathLike[str] | Sequence[EpisodeData] | Demonstrations,
    out_dir: str | os.PathLike[str],
    config: PDPConfig | None = None,
    *,
    overrides: dict[str, Any] | None = None,
    resume: bool = False,
    checkpoint_every: int = 500,
    progress: bool = True,
    tensorboard: bool = True,
    budget_s: float | None = None,
    stop_after: int | None = None,
    speed: TrainSpeedConfig | None = None,
    snapshot_every_s: float | None = None,
) -> TrainResult:
    """Train a PDP (or, with ``z_dim=0``, the plain diffusion policy) on expert demonstrations.

    Args:
        data: Dataset folder/file (``embodied collect``, robomimic, LeRobotDataset v3), an
            opened dataset (e.g. LIBERO's files through ``sim.libero.load_demonstrations``)
            or in-memory :class:`Demonstrations`.
        out_dir: Output folder (checkpoint, train state, TensorBoard logs).
        config: Base config; dims, names and env id are derived from the data.
        overrides: Config fields to override (e.g. ``{"steps": 2000, "z_dim": 0}``).
        resume: Continue from ``out_dir/train_state.json``.
        checkpoint_every: Steps between resumable checkpoints.
        progress: Show a rich progress bar.
        tensorboard: Write TensorBoard scalars to ``out_dir/tb``.
        budget_s: Stop (and checkpoint) once this much wall time is spent.
        stop_after: Stop (and checkpoint) after this many steps in this call (tests).
        speed: How training uses the hardware (:class:`TrainSpeedConfig`; default: its
            defaults). Not saved with the policy.
        snapshot_every_s: Keep the EMA policy every this many seconds of training wall time
            (summed over resumed calls) and at the last step, in ``out_dir/snapshots/``.

    Returns:
        A :class:`TrainResult`.
    """
    with Distributed.from_env() as dist:  # under torchrun / accelerate launch: DDP
        return _train_pdp(
            dist, data, out_dir, config, overrides, resume, checkpoint_every, progress,
            tensorboard, budget_s, stop_after, speed or TrainSpeedConfig(), snapshot_every_s,
        )  # fmt: skip


# ---- train_pdp in named steps -------------------------------------------------------------
#
# As stable-baselines3's ``learn -> collect_rollouts -> train``: :func:`_train_pdp` runs the
# steps below in order. The order is part of the result: the steps draw from the run's
# generator (and from the global torch RNG, which :func:`_build_policy` seeds) one after the
# other, and a resumed run repeats an uninterrupted one bit for bit only while they draw in
# the same order.


@dataclass(frozen=True)
class _RunOptions:
    """The knobs of one :func:`train_pdp` call that the training steps read.

    Attributes:
        out: The run's output folder.
        checkpoint_every: Steps between resumable checkpoints (>= 1).
        budget_s: Wall time (seconds, from ``t0``) after which training stops; None: no limit.
        stop_after: Policy steps after which this call stops; None: no limit.
        speed: How training uses the hardware.
        snapshot_every_s: Seconds of training wall time between EMA snapshots; None: none.
        t0: ``time.perf_counter()`` (seconds) when the call began.
    """

    out: Path
    checkpoint_every: int
    budget_s: float | None
    stop_after: int | None
    speed: TrainSpeedConfig
    snapshot_every_s: float | None
    t0: float


@dataclass
class _Policy:
    """The networks and optimisation state of one run (CPU until :func:`_to_training_device`).

    Attributes:
        cfg: The run's config.
        model: The trained copy.
        ema: The exponential moving average of ``model`` (what is saved and served).
        opt: The optimizer over ``model``'s policy parameters (before ``dist.prepare``).
        gen: The generator every training draw comes from (batches, noise, timesteps, crops,
            the manifold's batches); its state is part of each checkpoint.
        text: (n_demonstrations, text_dim) frozen instruction embeddings; None without
            language conditioning.
    """

    cfg: PDPConfig
    model: PDPModel
    ema: PDPModel
    opt: torch.optim.Optimizer
    gen: torch.Generator
    text: torch.Tensor | None


@dataclass
class _Windows:
    """The training windows, normalised once on the CPU; frames stay uint8 until a batch.

    Attributes:
        count: Number of windows N.
        obs: (N, ...) encoded, normalised state observations.
        actions: (N, horizon, action_dim) normalised action chunks.
        z: (N, z_dim) knob-space latents of each window's demonstration, clamped to
            ``+-cfg.z_bound``; None for DP.
        demonstration: (N,) int64 demonstration index of each window.
        frames: Per camera, every demonstration's frames, (sum T_i, H, W, 3) uint8.
        frame_index: (N, n_obs_steps) int64 rows of ``frames`` each window sees.
    """

    count: int
    obs: torch.Tensor
    actions: torch.Tensor
    z: torch.Tensor | None
    demonstration: torch.Tensor
    frames: list[torch.Tensor]
    frame_index: torch.Tensor


class _Logs:
    """TensorBoard scalars and the progress bar of one run.

    Args:
        out: The run's folder; scalars go to ``out/tb``.
        tensorboard: Write TensorBoard scalars (the main process only).
        progress: Show the rich progress bar (the main process only).
    """

    def __init__(self, out: Path, tensorboard: bool, progress: bool) -> None:
        self.writer: Any = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(out / "tb"))
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        from embodied.progress import LoggedProgress

        self.bar = LoggedProgress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            disable=not progress,
            transient=False,
        )

    def scalar(self, tag: str, value: float, step: int) -> None:
        """Log ``value`` as TensorBoard scalar ``tag`` at ``step`` (a :data:`Logger`)."""
        if self.writer is not None:
            self.writer.add_scalar(tag, value, step)

    def close(self) -> None:
        """Flush and close the TensorBoard writer."""
        if self.writer is not None:
            self.writer.flush()
            self.writer.close()


class _Checkpoints:
    """When and what a run saves: resumable checkpoints and the EMA's timed snapshots.

    Owns the run's training clock: wall time (seconds) spent in the policy loop, summed over
    resumed calls (the learning curve's x axis). Only the main process saves.

    Args:
        run: The call's options (folder, checkpoint period, snapshot period).
        policy: The run's networks and generator.
        latents_raw: (n_demonstrations, z_dim) raw-space demonstration latents, saved with
            each checkpoint.
        extra: Further ``train_state.json`` fields (labels, window count, speed); the clock's
            ``train_seconds`` is added to it at each save after step 0.
        is_main: Whether this process writes files.
    """

    def __init__(
        self,
        run: _RunOptions,
        policy: _Policy,
        latents_raw: np.ndarray,
        extra: dict[str, Any],
        is_main: bool,
    ) -> None:
        self.run, self.policy, self.latents_raw = run, policy, latents_raw
        self.extra, self.is_main = extra, is_main
        self.prior_seconds = 0.0
        self.loop_t0 = 0.0
        self.next_snapshot = math.inf

    def save(self, step: int, opt: Any) -> None:
        """Write the resumable checkpoint of ``step`` (policy steps done) with ``opt``'s moments."""
        p = self.policy
        _save_state(self.run.out, step, p.model, p.ema, opt, p.gen, self.latents_raw, self.extra)

    def start_clock(self, prior_seconds: float) -> None:
        """Start the training clock at ``prior_seconds`` (seconds of earlier calls).

        The next snapshot is due at the first multiple of ``snapshot_every_s`` past it.
        """
        self.prior_seconds = prior_seconds
        self.loop_t0 = time.perf_counter()
        every = self.run.snapshot_every_s
        if every is not None:
            self.next_snapshot = (math.floor(prior_seconds / every) + 1) * every

    def train_seconds(self) -> float:
        """Training wall time so far (seconds), earlier calls included."""
        return self.prior_seconds + time.perf_counter() - self.loop_t0

    def after_step(self, step: int, total_steps: int, opt: Any) -> None:
        """Checkpoint and snapshot as due after policy step ``step`` of ``total_steps``.

        The clock is read once: a resumed run restarts its clock from the checkpoint's, so the
        checkpoint and a snapshot of the same step must carry the same time.
        """
        now = self.train_seconds()
        every, snapshot_every_s = self.run.checkpoint_every, self.run.snapshot_every_s
        if (step % every == 0 or step == total_steps) and self.is_main:
            self.extra["train_seconds"] = now
            self.save(step, opt)
        if self.is_main and (
            now >= self.next_snapshot or (step == total_steps and snapshot_every_s is not None)
        ):
            save_snapshot(self.run.out, step, self.policy.ema, now)
            if snapshot_every_s is not None:  # the next multiple of the period
                self.next_snapshot = (math.floor(now / snapshot_every_s) + 1) * snapshot_every_s

    def after_loop(self, step: int, total_steps: int, opt: Any) -> None:
        """Checkpoint a loop that stopped early at ``step``, unless that step was just saved."""
        if step % self.run.checkpoint_every != 0 and step != total_steps and self.is_main:
            self.extra["train_seconds"] = self.train_seconds()
            self.save(step, opt)


def _train_pdp(
    dist: Distributed,
    data: str | os.PathLike[str] | Sequence[EpisodeData] | Demonstrations,
    out_dir: str | os.PathLike[str],
    config: PDPConfig | None,
    overrides: dict[str, Any] | None,
    resume: bool,
    checkpoint_every: int,
    progress: bool,
    tensorboard: bool,
    budget_s: float | None,
    stop_after: int | None,
    speed: TrainSpeedConfig,
    snapshot_every_s: float | None,
) -> TrainResult:
    """:func:`train_pdp` inside the process context ``dist`` (which the caller tears down).

    The steps: load the demonstrations, check the options, open the run (fresh or resumed),
    resolve the config, build the policy and optimizer, then - under the progress bar -
    restore or initialise the state (the manifold), build the training windows, save step 0
    and run the policy loop, which checkpoints and snapshots as it goes.

    Args:
        dist: The process context (a plain process, or one DDP rank).
        data: As :func:`train_pdp`'s.
        out_dir: As :func:`train_pdp`'s.
        config: As :func:`train_pdp`'s.
        overrides: As :func:`train_pdp`'s.
        resume: As :func:`train_pdp`'s.
        checkpoint_every: As :func:`train_pdp`'s (steps).
        progress: As :func:`train_pdp`'s.
        tensorboard: As :func:`train_pdp`'s.
        budget_s: As :func:`train_pdp`'s (seconds).
        stop_after: As :func:`train_pdp`'s (steps).
        speed: As :func:`train_pdp`'s.
        snapshot_every_s: As :func:`train_pdp`'s (seconds).

    Returns:
        A :class:`TrainResult`.
    """
    t0 = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    demonstrations = _demonstrations(data, out, resume, config, overrides)
    _check_schedule(checkpoint_every, snapshot_every_s)
    state_meta = _open_run(out, resume)
    # no rank writes to the folder before every rank has opened it: a late rank would refuse
    # rank 0's step-0 checkpoint as another run's, or delete its in-flight temporaries as a
    # killed run's
    dist.barrier()
    if state_meta is not None:
        cfg = _resumed_config(out, state_meta, overrides)
    else:
        cfg = _new_config(demonstrations, config, overrides)
    policy = _build_policy(cfg, demonstrations, speed)
    run = _RunOptions(out, checkpoint_every, budget_s, stop_after, speed, snapshot_every_s, t0)
    logs = _Logs(out, tensorboard and dist.is_main, progress and dist.is_main)
    with logs.bar:
        deadline = None if budget_s is None else t0 + 0.3 * budget_s
        latents_raw, start_step = _init_state(
            policy, demonstrations, out, state_meta, logs, dist, deadline
        )
        windows = _training_windows(policy, demonstrations, latents_raw)
        latents_knob = _knob_latents(policy, latents_raw, len(demonstrations))
        extra = {
            "labels": demonstrations.labels,
            "n_windows": windows.count,
            "speed": speed.to_dict(),
        }
        checkpoints = _Checkpoints(run, policy, latents_raw, extra, dist.is_main)
        if state_meta is None and dist.is_main:
            checkpoints.save(0, policy.opt)
        prior_seconds = float((state_meta or {}).get("train_seconds", 0.0))
        step, losses = _train_policy(
            run, policy, windows, checkpoints, start_step, prior_seconds, logs, dist
        )
    logs.close()
    final = float(np.mean(losses[-50:])) if losses else math.nan
    return TrainResult(
        out, step, final, latents_knob, list(demonstrations.labels), time.perf_counter() - t0
    )


def _demonstrations(
    data: str | os.PathLike[str] | Sequence[EpisodeData] | Demonstrations,
    out: Path,
    resume: bool,
    config: PDPConfig | None,
    overrides: dict[str, Any] | None,
) -> Demonstrations:
    """The training demonstrations: ``data`` itself, or loaded with the run's cameras' frames.

    Args:
        data: In-memory demonstrations, or a dataset (path or opened) to load.
        out: The run's folder (a resumed run's config names its cameras).
        resume: Whether the run is resumed.
        config: The caller's base config.
        overrides: The caller's config overrides.

    Returns:
        The :class:`Demonstrations`.
    """
    if isinstance(data, Demonstrations):
        return data
    return load_demonstrations(data, cameras=_cameras(out, resume, config, overrides))


def _check_schedule(checkpoint_every: int, snapshot_every_s: float | None) -> None:
    """Check the checkpoint period (steps, >= 1) and the snapshot period (seconds, > 0).

    Raises:
        ConfigError: either is out of range.
    """
    if checkpoint_every < 1:
        raise ConfigError(f"checkpoint_every={checkpoint_every} must be >= 1", fix="use e.g. 500")
    if snapshot_every_s is not None and not snapshot_every_s > 0:
        raise ConfigError(
            f"snapshot_every_s={snapshot_every_s} must be > 0", fix="use e.g. 600 (10 minutes)"
        )


def _open_run(out: Path, resume: bool) -> dict[str, Any] | None:
    """Open run folder ``out``: clear what a kill left half-written, read a resumed state.

    Args:
        out: The run's folder.
        resume: Continue the run there (else ``out`` must hold none).

    Returns:
        ``train_state.json`` of the resumed run; None for a new run.

    Raises:
        ConfigError: a new run over an existing one.
        CheckpointError: nothing to resume, or a damaged ``train_state.json``.
    """
    if not resume and (out / STATE_JSON).exists():  # never train over a run's checkpoints
        raise ConfigError(
            f"{str(out)!r} holds a training run ({out / STATE_JSON})",
            fix="add --resume to continue it, or pass a new --out to start another run",
        )
    for folder in (out, out / SNAPSHOTS):  # what a killed run left half-written
        remove_stale_temps(folder)
    if not resume:
        return None
    if not (out / STATE_JSON).exists():
        raise CheckpointError(
            f"nothing to resume: {out / STATE_JSON} does not exist",
            fix="drop --resume to start a new run",
        )
    return _read_train_state(out)


def _resumed_config(
    out: Path, state_meta: dict[str, Any], overrides: dict[str, Any] | None
) -> PDPConfig:
    """The config a resumed run continues with: its saved one, ``steps`` overridable.

    Args:
        out: The run's folder.
        state_meta: Its ``train_state.json``.
        overrides: The caller's overrides; only ``steps`` applies to a resumed run.

    Returns:
        The :class:`PDPConfig`.

    Raises:
        CheckpointError: the saved config does not build.
    """
    meta_dict = state_meta["config"]
    cfg = build_from_file(
        out / STATE_JSON,
        lambda: PDPConfig.from_dict(meta_dict),
        what="PDP train state",
        fix=STATE_FIX,
    )
    if overrides:
        cfg = dataclasses.replace(cfg, **{k: v for k, v in overrides.items() if k in ("steps",)})
    return cfg


def _dim_names(demonstrations: Demonstrations) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The state and action dims' names the dataset's env spec records (may be empty)."""
    spec = demonstrations.env_args
    names = spec.get("observation", {}).get("state", {}).get("names", ())
    anames = spec.get("action", {}).get("names", ())
    return tuple(names), tuple(anames)


def _data_fields(demonstrations: Demonstrations, base: PDPConfig) -> dict[str, Any]:
    """``base``'s fields (as a dict) with what the data fixes: dims, names, env id, frame size.

    Args:
        demonstrations: The training demonstrations.
        base: The base config.

    Returns:
        The fields, ``vision`` and ``manifold`` as nested dicts.

    Raises:
        DatasetError: cameras whose frames differ in size.
    """
    spec = demonstrations.env_args
    names, anames = _dim_names(demonstrations)
    derived: dict[str, Any] = {
        "state_dim": demonstrations.state_dim,
        "action_dim": demonstrations.action_dim,
        "state_names": names if len(names) == demonstrations.state_dim else (),
        "action_names": anames if len(anames) == demonstrations.action_dim else (),
        "env_id": str(spec.get("env_id", base.env_id)),
    }
    if spec.get("control_rate_hz"):
        derived["control_dt"] = 1.0 / float(spec["control_rate_hz"])
    kw = {**base.to_dict(), **derived}
    if demonstrations.images:  # the frames' size: one size for all cameras
        sizes = {c: f[0].shape[1:3] for c, f in demonstrations.images.items()}
        if len(set(sizes.values())) > 1:
            raise DatasetError(
                f"the cameras' frames differ in size ({sizes}); the policy's encoder "
                "takes one image size",
                fix="record all cameras at one --image-size",
            )
        kw["vision"]["image_shape"] = tuple(next(iter(sizes.values())))
    if base.state_dim != demonstrations.state_dim:  # index fields of another state layout
        kw["obs_dims"] = kw["path_dims"] = None
    return kw


def _new_config(
    demonstrations: Demonstrations, config: PDPConfig | None, overrides: dict[str, Any] | None
) -> PDPConfig:
    """The config of a new run: the base (or ``overrides["variant"]``'s preset), the data's
    fields, then the overrides.

    Args:
        demonstrations: The training demonstrations.
        config: The caller's base config (default: :class:`PDPConfig`'s defaults).
        overrides: Fields to override; ``"manifold.<f>"``/``"vision.<f>"`` name nested fields,
            ``"obs_exclude"`` state dim names the denoiser must not see.

    Returns:
        The :class:`PDPConfig`.

    Raises:
        ConfigError: unknown or unnamed state dims to exclude.
        DatasetError: cameras whose frames differ in size.
    """
    variant = (overrides or {}).get("variant")
    base = config or PDPConfig()
    if variant is not None:  # the variant's preset under the caller's config fields
        base = PDPConfig.for_variant(str(variant))
    kw = _data_fields(demonstrations, base)
    if base.first_window_only and "horizon" not in (overrides or {}):
        # the reference's horizon is the demonstration length: the longest one here
        kw["horizon"] = max(len(st) for st in demonstrations.states)
        kw["n_action_steps"] = (overrides or {}).get("n_action_steps", kw["horizon"])
    names = _dim_names(demonstrations)[0]
    for key, value in (overrides or {}).items():
        if key == "obs_exclude":  # state dim names the denoiser must not see
            kw["obs_dims"] = _obs_dims_without(names, demonstrations.state_dim, value)
        elif key.startswith(("manifold.", "vision.")):  # e.g. {"manifold.steps": 300}
            group, name = key.split(".", 1)
            kw[group][name] = value
        else:
            kw[key] = value
    return PDPConfig.from_dict(kw)


def _build_policy(
    cfg: PDPConfig, demonstrations: Demonstrations, speed: TrainSpeedConfig
) -> _Policy:
    """Seed, build the model and its EMA copy, fit the normalisers, make the optimizer.

    Seeds the global torch RNG with ``cfg.seed`` (the weights' initialisation draws from it)
    and a fresh generator for everything training draws later.

    Args:
        cfg: The run's config.
        demonstrations: The training demonstrations (the normalisers' statistics).
        speed: How training uses the hardware (the optimizer's fused kernel).

    Returns:
        The :class:`_Policy`, on the CPU.

    Raises:
        DatasetError: the policy's cameras are missing from the demonstrations; a
            demonstration lacks an instruction for language conditioning.
        ConfigError: the text encoder's width is not ``vision.text_dim``.
    """
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    model = PDPModel(cfg)
    ema = PDPModel(cfg)
    model.normalizer.set_stats(**to_model_space(demonstrations, cfg).stats())
    cams = cfg.vision.cameras
    missing_cams = [c for c in cams if c not in demonstrations.images]
    if missing_cams:
        raise DatasetError(
            f"the policy sees cameras {list(cams)} but the demonstrations carry "
            f"{sorted(demonstrations.images)}",
            fix="load the demonstrations with those cameras (load_demonstrations(cameras=...))",
        )
    if model.obs_encoder is not None and cams:
        mean, std = demonstrations.image_stats(cams)
        model.obs_encoder.set_image_stats(
            torch.as_tensor(mean, dtype=torch.float32), torch.as_tensor(std, dtype=torch.float32)
        )
    text = _text_embeddings(cfg, demonstrations)
    if model.obs_encoder is not None and text is not None:
        model.obs_encoder.set_text_stats(text)
    return _Policy(cfg, model, ema, make_optimizer(model, cfg, speed), gen, text)


def _init_state(
    policy: _Policy,
    demonstrations: Demonstrations,
    out: Path,
    state_meta: dict[str, Any] | None,
    logs: _Logs,
    dist: Distributed,
    deadline: float | None,
) -> tuple[np.ndarray, int]:
    """Restore a resumed run's state, or initialise a new one (training the manifold for PDP).

    Args:
        policy: The run's networks, optimizer and generator; updated in place.
        demonstrations: The training demonstrations.
        out: The run's folder.
        state_meta: A resumed run's ``train_state.json``; None for a new run.
        logs: Where the manifold logs its losses and progress.
        dist: The process context (rank 0's manifold is every rank's).
        deadline: ``time.perf_counter()`` value (seconds) that ends manifold training early.

    Returns:
        The (n_demonstrations, z_dim) raw-space demonstration latents (z_dim 0 for DP) and
        the policy step training continues from.

    Raises:
        CheckpointError: a damaged train-state tensors file.
    """
    model, ema, cfg = policy.model, policy.ema, policy.cfg
    start_step = 0
    if state_meta is not None:
        latents_raw = _restore_state(policy, out, state_meta)
        start_step = int(state_meta["step"])
    elif cfg.uses_z:
        bar = logs.bar
        task = bar.add_task(
            "manifold", total=manifold_steps(len(demonstrations), cfg.manifold), info=""
        )
        latents_raw = train_manifold(
            model,
            demonstrations,
            policy.gen,
            logs.scalar,
            on_step=lambda s: bar.update(task, completed=s + 1),
            deadline=deadline,
        )
        latents_raw = dist.broadcast(latents_raw)  # rank 0's manifold for every rank
        if cfg.manifold.standardize_z:
            model.normalizer.set_stats(
                z_mean=latents_raw.mean(0), z_whiten=zca_whitening(latents_raw)
            )
        ema.load_state_dict(model.state_dict())
    else:
        latents_raw = np.zeros((len(demonstrations), 0))
        ema.load_state_dict(model.state_dict())
    model.normalizer.check()
    if model.obs_encoder is not None:
        model.obs_encoder.check()
    return latents_raw, start_step


def _restore_state(policy: _Policy, out: Path, state_meta: dict[str, Any]) -> np.ndarray:
    """Load the checkpoint ``state_meta`` names into the weights, EMA, optimizer and generator.

    Args:
        policy: The run's networks, optimizer and generator; updated in place.
        out: The run's folder.
        state_meta: Its ``train_state.json``.

    Returns:
        The (n_demonstrations, z_dim) raw-space demonstration latents it holds.

    Raises:
        CheckpointError: a missing or damaged tensors file, or one that does not fit.
    """
    tensors = _read_train_tensors(out, state_meta)

    def restore() -> None:
        policy.model.load_state_dict(
            {k[6:]: v for k, v in tensors.items() if k.startswith("model.")}
        )
        policy.ema.load_state_dict({k[4:]: v for k, v in tensors.items() if k.startswith("ema.")})
        restore_optimizer(policy.opt, tensors, state_meta["optimizer"])
        policy.gen.set_state(tensors["rng.generator"])

    build_from_file(
        out / Path(state_meta["tensors"]).name,
        restore,
        what="PDP train-state tensors",
        fix=STATE_FIX,
    )
    latents: np.ndarray = tensors[LATENTS_KEY].double().numpy()
    return latents


def _training_windows(
    policy: _Policy, demonstrations: Demonstrations, latents_raw: np.ndarray
) -> _Windows:
    """Cut the demonstrations into training windows and normalise them once.

    Args:
        policy: The run's model (its normalisers) and config.
        demonstrations: The training demonstrations.
        latents_raw: (n_demonstrations, z_dim) raw-space demonstration latents.

    Returns:
        The :class:`_Windows`.
    """
    model, cfg = policy.model, policy.cfg
    obs_np, chunks_np, idx_np = policy_windows(demonstrations, cfg)
    frames = frame_cache(demonstrations, cfg.vision.cameras)
    frame_idx = torch.from_numpy(window_frames(demonstrations, cfg))
    idx_t = torch.from_numpy(idx_np)
    with torch.no_grad():
        obs_t = model.encode_state(torch.as_tensor(obs_np, dtype=torch.float32))
        act_t = model.normalizer.norm_action(torch.as_tensor(chunks_np, dtype=torch.float32))
        if cfg.uses_z:
            zk = model.normalizer.latent_to_knob(torch.as_tensor(latents_raw, dtype=torch.float32))
            z_t: torch.Tensor | None = zk.clamp(-cfg.z_bound, cfg.z_bound)[torch.as_tensor(idx_np)]
        else:
            z_t = None
    return _Windows(len(obs_np), obs_t, act_t, z_t, idx_t, frames, frame_idx)


def _knob_latents(policy: _Policy, latents_raw: np.ndarray, n: int) -> np.ndarray:
    """(n, z_dim) knob-space demonstration latents of raw ones (n, 0 for DP)."""
    if not policy.cfg.uses_z:
        return np.zeros((n, 0))
    latents: np.ndarray = policy.model.normalizer.latent_to_knob(
        torch.as_tensor(latents_raw, dtype=torch.float32)
    ).numpy()
    return latents


def _to_training_device(policy: _Policy, speed: TrainSpeedConfig, dist: Distributed) -> Any:
    """Move the networks to ``dist``'s device, set the encoder's compute, wrap for DDP.

    Args:
        policy: The run's networks and optimizer.
        speed: How training uses the hardware (autocast, channels-last, compile).
        dist: The process context.

    Returns:
        The loss module and the optimizer, as ``dist.prepare`` wraps them.
    """
    model, ema, opt = policy.model, policy.ema, policy.opt
    model.train()
    model.to(dist.device)
    ema.to(dist.device)
    if model.obs_encoder is not None:  # the training copy only; the EMA is never run here
        model.obs_encoder.set_compute(
            autocast_dtype(speed, dist.device), speed.channels_last, speed.compile
        )
        _match_state_layouts(opt)
    trainable: torch.nn.Module = model.denoiser
    if model.obs_encoder is not None:
        trainable = torch.nn.ModuleList([model.denoiser, model.obs_encoder])
    return dist.prepare(LossModule(model, trainable), opt)


def _should_stop(run: _RunOptions, step: int, start_step: int, dist: Distributed) -> bool:
    """Whether this call stops before policy step ``step``: ``stop_after`` steps done, or the
    wall-time budget spent on any rank (every rank then stops at the same step)."""
    if run.stop_after is not None and step - start_step >= run.stop_after:
        return True
    return run.budget_s is not None and dist.any_rank(time.perf_counter() - run.t0 > run.budget_s)


def _batch_inputs(
    policy: _Policy, windows: _Windows, dist: Distributed
) -> tuple[torch.Tensor | None, ...]:
    """Draw one global batch from ``policy.gen``; this rank's block of it, on its device.

    Draws, in this order: the windows, the noise and the timesteps of the global batch (as
    ``compute_loss`` would draw them), then the crops of this rank's frames. Each DDP rank
    trains on its block: the same update as one process on the whole batch.

    Args:
        policy: The run's config and generator.
        windows: The training windows.
        dist: The process context.

    Returns:
        The loss module's arguments: observations, actions, z, (no global condition),
        timesteps, noise, (B, n_cams, n_obs_steps, H, W, 3) uint8 frames, text embeddings
        and crop offsets; None where the policy has none.
    """
    cfg, gen, vcfg = policy.cfg, policy.gen, policy.cfg.vision
    n_win = windows.count
    if cfg.first_window_only:  # the reference's shuffled pass over its windows
        b = torch.randperm(n_win, generator=gen)[: cfg.batch_size]
    else:
        b = torch.randint(0, n_win, (min(cfg.batch_size, n_win),), generator=gen)
    noise = torch.randn(windows.actions[b].shape, generator=gen)
    ts = torch.randint(0, cfg.num_train_timesteps, (len(b),), generator=gen)
    r = dist.shard(len(b))
    images = offsets = None
    if vcfg.cameras:  # (B, n_cams, n_obs_steps, H, W, 3) uint8, crops drawn from ``gen``
        fi = windows.frame_index[b][r]
        images = torch.stack([f[fi] for f in windows.frames], dim=1)
        offsets = crop_offsets(
            images.shape[0] * images.shape[1] * images.shape[2],
            vcfg.image_shape,
            vcfg.crop,
            vcfg.crop_is_random,
            gen,
        )
    text = None if policy.text is None else policy.text[windows.demonstration[b][r]]
    return dist.to_device(
        windows.obs[b][r],
        windows.actions[b][r],
        None if windows.z is None else windows.z[b][r],
        None,
        ts[r],
        noise[r],
        images,
        text,
        offsets,
    )


def _policy_step(
    policy: _Policy, loss_fn: Any, opt: Any, windows: _Windows, step: int, dist: Distributed
) -> tuple[float, torch.Tensor]:
    """One optimiser step of the denoiser (and encoder), then the EMA update.

    Args:
        policy: The run's networks, config and generator.
        loss_fn: The (DDP-wrapped) loss module.
        opt: The (wrapped) optimizer.
        windows: The training windows.
        step: Policy steps done before this one (the learning rate's schedule position).
        dist: The process context.

    Returns:
        The learning rate used and this rank's denoising loss (a scalar tensor).
    """
    cfg = policy.cfg
    lr = policy_lr(cfg, step)
    for g in opt.param_groups:
        g["lr"] = lr
    loss: torch.Tensor = loss_fn(*_batch_inputs(policy, windows, dist))
    opt.zero_grad(set_to_none=True)
    dist.backward(loss)
    if cfg.grad_clip > 0:
        dist.clip_grad_norm_(policy.model.policy_parameters(), cfg.grad_clip)
    opt.step()
    _ema_update(policy.ema, policy.model, cfg.ema_decay)
    return lr, loss


def _train_policy(
    run: _RunOptions,
    policy: _Policy,
    windows: _Windows,
    checkpoints: _Checkpoints,
    start_step: int,
    prior_seconds: float,
    logs: _Logs,
    dist: Distributed,
) -> tuple[int, list[float]]:
    """The policy loop: step from ``start_step`` to ``cfg.steps`` (or until told to stop).

    Args:
        run: The call's options (stop conditions, speed).
        policy: The run's networks, optimizer and generator.
        windows: The training windows.
        checkpoints: Saves checkpoints and snapshots as they fall due.
        start_step: Policy steps done before this call.
        prior_seconds: Training wall time (seconds) of earlier calls.
        logs: TensorBoard scalars and the progress bar.
        dist: The process context.

    Returns:
        The policy steps done in total and this call's per-step losses (mean over ranks).
    """
    cfg, bar = policy.cfg, logs.bar
    task = bar.add_task("policy", total=cfg.steps, completed=start_step, info="")
    losses: list[float] = []
    step = start_step
    checkpoints.start_clock(prior_seconds)
    loss_fn, opt = _to_training_device(policy, run.speed, dist)
    while step < cfg.steps:
        if _should_stop(run, step, start_step, dist):
            break
        lr, loss = _policy_step(policy, loss_fn, opt, windows, step, dist)
        step += 1
        losses.append(dist.mean(loss))
        if step % 10 == 0:
            logs.scalar("train/loss", losses[-1], step)
            logs.scalar("train/lr", lr, step)
            bar.update(task, completed=step, info=f"loss {np.mean(losses[-50:]):.4f}")
        checkpoints.after_step(step, cfg.steps, opt)
    checkpoints.after_loop(step, cfg.steps, opt)
    bar.update(task, completed=step)
    return step, losses


def policy_lr(config: PDPConfig, step: int) -> float:
    """Learning rate of the denoiser at ``step``.

    ``warmup_cosine``: linear warm-up, then cosine decay to 0.1 lr. ``cosine_annealing``:
    ``min_lr + (lr - min_lr) (1 + cos(pi step / steps)) / 2``, the reference's
    ``CosineAnnealingLR`` (stepped per epoch there; one epoch is one step when the
    demonstrations fit in one batch, as on the reference's tasks).
    """
    if config.lr_schedule == "cosine_annealing":
        frac = min(1.0, step / max(1, config.steps))
        return config.min_lr + (config.lr - config.min_lr) * 0.5 * (1.0 + math.cos(math.pi * frac))
    return config.lr * cosine_lr(step, config.steps, config.warmup_steps)


def training_finished(out_dir: str | os.PathLike[str]) -> bool:
    """Whether the run in ``out_dir`` trained all its steps (a killed run has not, even when
    its step-0 checkpoint already wrote ``model.safetensors``).

    Raises:
        CheckpointError: a damaged ``train_state.json``.
    """
    out = Path(out_dir)
    if not (out / STATE_JSON).exists():
        return False
    state = _read_train_state(out)
    steps = state["config"].get("steps")
    return isinstance(steps, int) and state["step"] >= steps


def load_train_latents(out_dir: str | os.PathLike[str]) -> tuple[np.ndarray, list[str]]:
    """Knob-space demonstration latents and labels stored with a training run (for plots)."""
    out = Path(out_dir)
    if not (out / STATE_JSON).exists():
        raise CheckpointError(
            f"{out} has no {STATE_JSON}", fix="pass the --out folder of `embodied train pdp`"
        )
    meta = _read_train_state(out)
    tensors = _read_train_tensors(out, meta)
    raw = tensors[LATENTS_KEY]
    mean, w = tensors.get("ema.normalizer.z_mean"), tensors.get("ema.normalizer.z_whiten")
    if raw.shape[1] == 0 or mean is None or w is None:
        return raw.numpy(), list(meta.get("labels", []))
    return ((raw - mean) @ w.T).numpy(), list(meta.get("labels", []))


def zca_whitening(latents: np.ndarray, floor: float = 1e-2) -> np.ndarray:
    """ZCA whitening matrix ``Cov^(-1/2)`` of latents (N, d).

    Eigenvalues below ``floor`` x the largest are raised to it, so a (near-)degenerate
    latent direction is not blown up into noise.
    """
    cov = np.atleast_2d(np.cov(latents, rowvar=False))
    vals, vecs = np.linalg.eigh(cov)
    vals = np.maximum(vals, max(1e-8, floor * float(vals.max())))
    return (vecs / np.sqrt(vals)) @ vecs.T
