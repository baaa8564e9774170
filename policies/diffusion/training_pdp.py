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
    """:func:`train_pdp` inside the process context ``dist`` (which the caller tears down)."""
    t0 = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    demonstrations = (
        data
        if isinstance(data, Demonstrations)
        else load_demonstrations(data, cameras=_cameras(out, resume, config, overrides))
    )
    if checkpoint_every < 1:
        raise ConfigError(f"checkpoint_every={checkpoint_every} must be >= 1", fix="use e.g. 500")
    if snapshot_every_s is not None and not snapshot_every_s > 0:
        raise ConfigError(
            f"snapshot_every_s={snapshot_every_s} must be > 0", fix="use e.g. 600 (10 minutes)"
        )

    state_meta: dict[str, Any] | None = None
    if not resume and (out / STATE_JSON).exists():  # never train over a run's checkpoints
        raise ConfigError(
            f"{str(out)!r} holds a training run ({out / STATE_JSON})",
            fix="add --resume to continue it, or pass a new --out to start another run",
        )
    for folder in (out, out / SNAPSHOTS):  # what a killed run left half-written
        remove_stale_temps(folder)
    if resume:
        if not (out / STATE_JSON).exists():
            raise CheckpointError(
                f"nothing to resume: {out / STATE_JSON} does not exist",
                fix="drop --resume to start a new run",
            )
        state_meta = _read_train_state(out)
        meta_dict = state_meta["config"]
        cfg = build_from_file(
            out / STATE_JSON,
            lambda: PDPConfig.from_dict(meta_dict),
            what="PDP train state",
            fix=STATE_FIX,
        )
        if overrides:
            cfg = dataclasses.replace(
                cfg, **{k: v for k, v in overrides.items() if k in ("steps",)}
            )
    else:
        variant = (overrides or {}).get("variant")
        base = config or PDPConfig()
        if variant is not None:  # the variant's preset under the caller's config fields
            base = PDPConfig.for_variant(str(variant))
        spec = demonstrations.env_args
        names = spec.get("observation", {}).get("state", {}).get("names", ())
        anames = spec.get("action", {}).get("names", ())
        derived: dict[str, Any] = {
            "state_dim": demonstrations.state_dim,
            "action_dim": demonstrations.action_dim,
            "state_names": tuple(names) if len(names) == demonstrations.state_dim else (),
            "action_names": tuple(anames) if len(anames) == demonstrations.action_dim else (),
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
        if base.first_window_only and "horizon" not in (overrides or {}):
            # the reference's horizon is the demonstration length: the longest one here
            kw["horizon"] = max(len(st) for st in demonstrations.states)
            kw["n_action_steps"] = (overrides or {}).get("n_action_steps", kw["horizon"])
        for key, value in (overrides or {}).items():
            if key == "obs_exclude":  # state dim names the denoiser must not see
                kw["obs_dims"] = _obs_dims_without(tuple(names), demonstrations.state_dim, value)
            elif key.startswith(("manifold.", "vision.")):  # e.g. {"manifold.steps": 300}
                group, name = key.split(".", 1)
                kw[group][name] = value
            else:
                kw[key] = value
        cfg = PDPConfig.from_dict(kw)

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
    text_demo = _text_embeddings(cfg, demonstrations)
    if model.obs_encoder is not None and text_demo is not None:
        model.obs_encoder.set_text_stats(text_demo)
    opt = make_optimizer(model, cfg, speed)

    writer = None
    if tensorboard and dist.is_main:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(out / "tb"))

    def log(tag: str, value: float, step: int) -> None:
        if writer is not None:
            writer.add_scalar(tag, value, step)

    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        disable=not (progress and dist.is_main),
        transient=False,
    )
    start_step = 0
    with bar:
        if state_meta is not None:
            tensors = _read_train_tensors(out, state_meta)
            resumed = state_meta

            def restore() -> None:
                model.load_state_dict(
                    {k[6:]: v for k, v in tensors.items() if k.startswith("model.")}
                )
                ema.load_state_dict({k[4:]: v for k, v in tensors.items() if k.startswith("ema.")})
                restore_optimizer(opt, tensors, resumed["optimizer"])
                gen.set_state(tensors["rng.generator"])

            build_from_file(
                out / Path(resumed["tensors"]).name,
                restore,
                what="PDP train-state tensors",
                fix=STATE_FIX,
            )
            latents_raw = tensors[LATENTS_KEY].double().numpy()
            start_step = int(state_meta["step"])
        elif cfg.uses_z:
            task = bar.add_task(
                "manifold", total=manifold_steps(len(demonstrations), cfg.manifold), info=""
            )
            latents_raw = train_manifold(
                model,
                demonstrations,
                gen,
                log,
                on_step=lambda s: bar.update(task, completed=s + 1),
                deadline=None if budget_s is None else t0 + 0.3 * budget_s,
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

        # training windows, normalised once; frames stay uint8 and are gathered per batch
        obs_np, chunks_np, idx_np = policy_windows(demonstrations, cfg)
        frames = frame_cache(demonstrations, cams)
        frame_idx = torch.from_numpy(window_frames(demonstrations, cfg))
        idx_t = torch.from_numpy(idx_np)
        with torch.no_grad():
            obs_t = model.encode_state(torch.as_tensor(obs_np, dtype=torch.float32))
            act_t = model.normalizer.norm_action(torch.as_tensor(chunks_np, dtype=torch.float32))
            if cfg.uses_z:
                zk = model.normalizer.latent_to_knob(
                    torch.as_tensor(latents_raw, dtype=torch.float32)
                )
                z_t: torch.Tensor | None = zk.clamp(-cfg.z_bound, cfg.z_bound)[
                    torch.as_tensor(idx_np)
                ]
            else:
                z_t = None
        latents_knob = (
            model.normalizer.latent_to_knob(
                torch.as_tensor(latents_raw, dtype=torch.float32)
            ).numpy()
            if cfg.uses_z
            else np.zeros((len(demonstrations), 0))
        )
        extra = {
            "labels": demonstrations.labels,
            "n_windows": len(obs_np),
            "speed": speed.to_dict(),
        }
        if state_meta is None and dist.is_main:
            _save_state(out, 0, model, ema, opt, gen, latents_raw, extra)

        task = bar.add_task("policy", total=cfg.steps, completed=start_step, info="")
        losses: list[float] = []
        step = start_step
        # training wall time summed over resumed calls: the learning curve's x axis
        prior_seconds = float((state_meta or {}).get("train_seconds", 0.0))
        loop_t0 = time.perf_counter()

        def train_seconds() -> float:
            return prior_seconds + time.perf_counter() - loop_t0

        next_snapshot = math.inf
        if snapshot_every_s is not None:
            next_snapshot = (math.floor(prior_seconds / snapshot_every_s) + 1) * snapshot_every_s
        n_win = len(obs_np)
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
        loss_fn, opt = dist.prepare(LossModule(model, trainable), opt)
        vcfg = cfg.vision
        while step < cfg.steps:
            if stop_after is not None and step - start_step >= stop_after:
                break
            if budget_s is not None and dist.any_rank(time.perf_counter() - t0 > budget_s):
                break
            lr = policy_lr(cfg, step)
            for g in opt.param_groups:
                g["lr"] = lr
            if cfg.first_window_only:  # the reference's shuffled pass over its windows
                b = torch.randperm(n_win, generator=gen)[: cfg.batch_size]
            else:
                b = torch.randint(0, n_win, (min(cfg.batch_size, n_win),), generator=gen)
            # noise and timesteps of the global batch, drawn as compute_loss would draw them;
            # each DDP rank trains on its block (same update as one process on the batch)
            noise = torch.randn(act_t[b].shape, generator=gen)
            ts = torch.randint(0, cfg.num_train_timesteps, (len(b),), generator=gen)
            r = dist.shard(len(b))
            images = offsets = None
            if cams:  # (B, n_cams, n_obs_steps, H, W, 3) uint8, crops drawn from ``gen``
                fi = frame_idx[b][r]
                images = torch.stack([f[fi] for f in frames], dim=1)
                offsets = crop_offsets(
                    images.shape[0] * images.shape[1] * images.shape[2],
                    vcfg.image_shape,
                    vcfg.crop,
                    vcfg.crop_is_random,
                    gen,
                )
            text = None if text_demo is None else text_demo[idx_t[b][r]]
            loss = loss_fn(
                *dist.to_device(
                    obs_t[b][r],
                    act_t[b][r],
                    None if z_t is None else z_t[b][r],
                    None,
                    ts[r],
                    noise[r],
                    images,
                    text,
                    offsets,
                )
            )
            opt.zero_grad(set_to_none=True)
            dist.backward(loss)
            if cfg.grad_clip > 0:
                dist.clip_grad_norm_(model.policy_parameters(), cfg.grad_clip)
            opt.step()
            _ema_update(ema, model, cfg.ema_decay)
            step += 1
            losses.append(dist.mean(loss))
            if step % 10 == 0:
                log("train/loss", losses[-1], step)
                log("train/lr", lr, step)
                bar.update(task, completed=step, info=f"loss {np.mean(losses[-50:]):.4f}")
            # one reading per step: a resumed run restarts its clock from the checkpoint's, so
            # the checkpoint and a snapshot of the same step must carry the same time
            now = train_seconds()
            if (step % checkpoint_every == 0 or step == cfg.steps) and dist.is_main:
                extra["train_seconds"] = now
                _save_state(out, step, model, ema, opt, gen, latents_raw, extra)
            if dist.is_main and (
                now >= next_snapshot or (step == cfg.steps and snapshot_every_s is not None)
            ):
                save_snapshot(out, step, ema, now)
                if snapshot_every_s is not None:  # the next multiple of the period
                    next_snapshot = (math.floor(now / snapshot_every_s) + 1) * snapshot_every_s
        if step % checkpoint_every != 0 and step != cfg.steps and dist.is_main:
            extra["train_seconds"] = train_seconds()
            _save_state(out, step, model, ema, opt, gen, latents_raw, extra)
        bar.update(task, completed=step)
    if writer is not None:
        writer.flush()
        writer.close()
    final = float(np.mean(losses[-50:])) if losses else math.nan
    return TrainResult(
        out, step, final, latents_knob, list(demonstrations.labels), time.perf_counter() - t0
    )


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
