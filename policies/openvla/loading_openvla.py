"""Save and load OpenVLA checkpoints: our folders and the released Hugging Face ones.

A folder holds ``config.json``, weights in safetensors (one file or shards with
``model.safetensors.index.json``) under the *released* parameter names, and tokenizer files.
``config.json`` is either ours (``{"policy_type": "openvla", "openvla": {...}}``) or a
released Prismatic config (``"model_type": "openvla"``); ``dataset_statistics.json`` beside
it adds action statistics (fine-tuned checkpoints). Weights always go through
:func:`convert_openvla.load_released_state`, so a checkpoint whose keys do not all map is
refused.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from embodied.errors import CheckpointError
from embodied.io import (
    build_from_file,
    check_config_counts,
    check_declared_size,
    load_safetensors_file,
    module_bytes,
    read_json_file,
    write_json,
)
from policies.openvla.configuration_openvla import OpenVLAConfig
from policies.openvla.convert_openvla import load_released_state, native_to_released
from policies.openvla.modeling_openvla import OpenVLAModel
from policies.openvla.processor_openvla import OpenVLAProcessor

WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"
RESAVE_FIX = (
    "restore the file, or re-save the checkpoint (`embodied train vla`, save_pretrained) or "
    "re-download it (huggingface-cli download ...)"
)


def resolve_device_dtype(
    device: str | torch.device = "auto", dtype: str | torch.dtype = "auto"
) -> tuple[torch.device, torch.dtype]:
    """``auto``: CUDA + bfloat16 when a GPU is present, else CPU + float32."""
    dev = torch.device(
        ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    )
    if dtype == "auto":
        dt = torch.bfloat16 if dev.type == "cuda" else torch.float32
    elif isinstance(dtype, str):
        names = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
        if dtype not in names:
            raise CheckpointError(f"unknown dtype {dtype!r}; use one of {sorted(names)} or auto")
        dt = names[dtype]
    else:
        dt = dtype
    return dev, dt


def resolve_path(spec: str | os.PathLike[str]) -> Path:
    """A local folder, or a hub id resolved through the local Hugging Face cache/hub."""
    path = Path(spec)
    if path.is_dir():
        return path
    if str(spec).count("/") == 1 and not path.exists():
        try:
            from huggingface_hub import snapshot_download

            return Path(
                snapshot_download(
                    str(spec),
                    allow_patterns=["*.json", "*.safetensors", "tokenizer*", "*.model", "*.txt"],
                )
            )
        except Exception as exc:
            raise CheckpointError(
                f"cannot resolve hub id {str(spec)!r}: {exc}",
                fix="download it first (huggingface-cli download ...) or pass a local folder",
            ) from exc
    raise CheckpointError(
        f"checkpoint {str(spec)!r} is neither a folder nor a hub id (owner/name)",
        fix="pass a folder with config.json + safetensors, or e.g. openvla/openvla-7b",
    )


def read_config(path: Path) -> OpenVLAConfig:
    """Our or a released ``config.json`` (+ preprocessor config, dataset statistics).

    Raises:
        CheckpointError: a file is missing, not valid JSON, or lacks or mistypes a key; the
            message names the file.
    """
    cfg_file = path / "config.json"
    if not cfg_file.exists():
        raise CheckpointError(f"{path} has no config.json", fix="pass a checkpoint folder")
    raw = read_json_file(cfg_file, what="OpenVLA config", fix=RESAVE_FIX)
    check_config_counts(raw, cfg_file, what="OpenVLA config", fix=RESAVE_FIX)
    if raw.get("policy_type") == "openvla":
        ours = raw.get("openvla")
        if not isinstance(ours, dict):
            raise CheckpointError(
                f"OpenVLA config {str(cfg_file)!r} has policy_type 'openvla' but no 'openvla' "
                f"object (keys: {sorted(raw)[:12]})",
                fix="re-save the checkpoint with `embodied train vla` / save_pretrained",
            )
        config = build_from_file(
            cfg_file, lambda: OpenVLAConfig.from_dict(ours), what="OpenVLA config", fix=RESAVE_FIX
        )
    elif raw.get("model_type") in ("openvla", "prismatic"):
        pre = path / "preprocessor_config.json"
        pre_raw = (
            read_json_file(pre, what="OpenVLA preprocessor config", fix=RESAVE_FIX)
            if pre.exists()
            else None
        )
        config = build_from_file(
            cfg_file,
            lambda: OpenVLAConfig.from_released(raw, pre_raw),
            what="released OpenVLA config",
            fix="pass an unmodified openvla/openvla-7b-style config.json (fused DINOv2+SigLIP)",
        )
    else:
        raise CheckpointError(
            f"{cfg_file} is not an OpenVLA config (policy_type={raw.get('policy_type')!r}, "
            f"model_type={raw.get('model_type')!r})",
            fix="pass an openvla checkpoint folder",
        )
    stats = path / "dataset_statistics.json"
    if stats.exists():
        extra = read_json_file(stats, what="OpenVLA dataset statistics", fix=RESAVE_FIX)
        config.norm_stats.update(extra)
        build_from_file(
            stats,
            lambda: OpenVLAConfig.from_dict(config.to_dict()),  # re-validates norm_stats
            what="OpenVLA dataset statistics",
            fix=RESAVE_FIX,
        )
    return config


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """All tensors of a folder's safetensors (single file or shards).

    Raises:
        CheckpointError: no weights, or a damaged index or weights file (named).
    """
    if (path / WEIGHTS).exists():
        return load_safetensors_file(path / WEIGHTS, what="OpenVLA weights", fix=RESAVE_FIX)
    if (path / INDEX).exists():
        index = read_json_file(path / INDEX, what="OpenVLA weights index", fix=RESAVE_FIX)
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict) or not all(
            isinstance(v, str) for v in weight_map.values()
        ):
            raise CheckpointError(
                f"OpenVLA weights index {str(path / INDEX)!r} lacks a 'weight_map' of "
                "parameter name -> shard file",
                fix=RESAVE_FIX,
            )
        state: dict[str, torch.Tensor] = {}
        for shard in sorted(set(weight_map.values())):
            # Shards are file names beside the index; never read outside the folder.
            state.update(
                load_safetensors_file(
                    path / Path(shard).name, what="OpenVLA weights shard", fix=RESAVE_FIX
                )
            )
        return state
    raise CheckpointError(
        f"{path} has no {WEIGHTS} or {INDEX}",
        fix=f"put the weights as safetensors beside config.json ({WEIGHTS}, or shards listed "
        f"in {INDEX}); pickled .bin/.pt checkpoints are refused",
    )


def read_tokenizer(path: Path) -> Any:
    """The checkpoint's tokenizer (AutoTokenizer, no remote code; fast tokenizer.json fallback)."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    try:
        return AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
    except Exception:
        if (path / "tokenizer.json").exists():
            return PreTrainedTokenizerFast.from_pretrained(str(path))
        raise


def _check_model_fits(
    cfg_file: Path, config: OpenVLAConfig, state: dict[str, torch.Tensor]
) -> None:
    """Build ``config`` on the meta device (no memory) and refuse it when transformers rejects
    a field or it declares far more than the weights hold (a damaged config.json would
    otherwise allocate it)."""
    from huggingface_hub.errors import StrictDataclassError

    try:
        with torch.device("meta"):
            declared = module_bytes(OpenVLAModel(config))
    except (StrictDataclassError, TypeError, ValueError, RuntimeError, OverflowError) as exc:
        raise CheckpointError(
            f"OpenVLA config {str(cfg_file)!r} does not build a model: {type(exc).__name__}: {exc}",
            fix=RESAVE_FIX,
        ) from exc
    stored = sum(int(t.numel()) * t.element_size() for t in state.values())
    check_declared_size(declared, stored, cfg_file, what="OpenVLA model", fix=RESAVE_FIX)


def load_pretrained(
    spec: str | os.PathLike[str],
    device: str | torch.device = "auto",
    dtype: str | torch.dtype = "auto",
    center_crop: bool | None = None,
    image_pipeline: str | None = None,
    action_convention: str = "openvla",
) -> tuple[OpenVLAModel, OpenVLAProcessor]:
    """Load a model and its processor from a folder or hub id.

    Args:
        spec: Folder or hub id (e.g. ``openvla/openvla-7b``).
        device: ``auto`` (CUDA if available), ``cpu`` or ``cuda[:i]``.
        dtype: ``auto`` (bfloat16 on GPU, float32 on CPU) or a dtype name.
        center_crop: Override the config's center-crop flag (True for LIBERO checkpoints).
        image_pipeline: Override the config's image pipeline (``libero_reference`` for
            LIBERO's raw frames).
        action_convention: The processor's action convention (see
            :data:`~policies.openvla.processor_openvla.ACTION_CONVENTIONS`).
    """
    path = resolve_path(spec)
    config = read_config(path)
    if center_crop is not None or image_pipeline is not None:
        overrides: dict[str, Any] = {}
        if center_crop is not None:
            overrides["center_crop"] = bool(center_crop)
        if image_pipeline is not None:
            overrides["image_pipeline"] = image_pipeline
        config = dataclasses.replace(config, **overrides)  # re-validated by __post_init__
    dev, dt = resolve_device_dtype(device, dtype)
    state = read_weights(path)
    _check_model_fits(path / "config.json", config, state)
    prev = torch.get_default_dtype()
    try:
        torch.set_default_dtype(dt if dt.is_floating_point else torch.float32)
        with torch.device(dev):
            model = OpenVLAModel(config)
    finally:
        torch.set_default_dtype(prev)
    try:
        load_released_state(model, state)
    except CheckpointError as exc:  # the weights are not what config.json describes
        raise CheckpointError(
            f"{str(path / 'config.json')!r} does not describe the weights beside it: {exc.message}",
            fix="restore config.json and the weights from the same checkpoint (or re-save it)",
        ) from exc
    model.to(device=dev, dtype=dt).eval()
    return model, OpenVLAProcessor(config, read_tokenizer(path), action_convention)


def save_pretrained(
    model: OpenVLAModel,
    tokenizer: Any,
    path: str | os.PathLike[str],
    released_config: bool = False,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write a checkpoint folder atomically (temporary sibling folder, then rename).

    Args:
        model: The model; weights are written under the released parameter names.
        tokenizer: Saved with ``save_pretrained``.
        path: Target folder (replaced if it exists).
        released_config: Write a released-style ``config.json`` instead of ours.
        extra: More fields for our ``config.json`` (e.g. training metadata).
    """
    from safetensors.torch import save_file

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        state = {k: v.detach().cpu().contiguous() for k, v in native_to_released(model).items()}
        save_file(state, str(tmp / WEIGHTS), metadata={"format": "pt"})
        cfg = model.config
        if released_config:
            write_json(tmp / "config.json", cfg.to_released())
        else:
            write_json(
                tmp / "config.json",
                {"policy_type": "openvla", "openvla": cfg.to_dict(), **(extra or {})},
            )
        tokenizer.save_pretrained(str(tmp))
        if target.exists():
            old = target.with_name(f".{target.name}.old")
            if old.exists():
                shutil.rmtree(old)
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old)
        else:
            os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return target
