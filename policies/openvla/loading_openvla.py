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

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from embodied.errors import CheckpointError
from embodied.io import write_json
from policies.openvla.configuration_openvla import OpenVLAConfig
from policies.openvla.convert_openvla import load_released_state, native_to_released
from policies.openvla.modeling_openvla import OpenVLAModel
from policies.openvla.processing_openvla import OpenVLAProcessor

WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"


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
    """Our or a released ``config.json`` (+ preprocessor config, dataset statistics)."""
    cfg_file = path / "config.json"
    if not cfg_file.exists():
        raise CheckpointError(f"{path} has no config.json", fix="pass a checkpoint folder")
    raw = json.loads(cfg_file.read_text())
    if raw.get("policy_type") == "openvla":
        config = OpenVLAConfig.from_dict(raw["openvla"])
    elif raw.get("model_type") in ("openvla", "prismatic"):
        pre = path / "preprocessor_config.json"
        config = OpenVLAConfig.from_released(
            raw, json.loads(pre.read_text()) if pre.exists() else None
        )
    else:
        raise CheckpointError(
            f"{cfg_file} is not an OpenVLA config (policy_type={raw.get('policy_type')!r}, "
            f"model_type={raw.get('model_type')!r})",
            fix="pass an openvla checkpoint folder",
        )
    stats = path / "dataset_statistics.json"
    if stats.exists():
        config.norm_stats.update(json.loads(stats.read_text()))
    return config


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """All tensors of a folder's safetensors (single file or shards)."""
    from safetensors.torch import load_file

    if (path / WEIGHTS).exists():
        return load_file(str(path / WEIGHTS))
    if (path / INDEX).exists():
        shards = sorted(set(json.loads((path / INDEX).read_text())["weight_map"].values()))
        state: dict[str, torch.Tensor] = {}
        for shard in shards:
            state.update(load_file(str(path / shard)))
        return state
    raise CheckpointError(
        f"{path} has no {WEIGHTS} or {INDEX}",
        fix="weights must be safetensors (pickled .bin/.pt checkpoints are refused)",
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


def load_pretrained(
    spec: str | os.PathLike[str],
    device: str | torch.device = "auto",
    dtype: str | torch.dtype = "auto",
    center_crop: bool | None = None,
) -> tuple[OpenVLAModel, OpenVLAProcessor]:
    """Load a model and its processor from a folder or hub id.

    Args:
        spec: Folder or hub id (e.g. ``openvla/openvla-7b``).
        device: ``auto`` (CUDA if available), ``cpu`` or ``cuda[:i]``.
        dtype: ``auto`` (bfloat16 on GPU, float32 on CPU) or a dtype name.
        center_crop: Override the config's center-crop flag (True for LIBERO checkpoints).
    """
    path = resolve_path(spec)
    config = read_config(path)
    if center_crop is not None:
        config.center_crop = bool(center_crop)
    dev, dt = resolve_device_dtype(device, dtype)
    state = read_weights(path)
    prev = torch.get_default_dtype()
    try:
        torch.set_default_dtype(dt if dt.is_floating_point else torch.float32)
        with torch.device(dev):
            model = OpenVLAModel(config)
    finally:
        torch.set_default_dtype(prev)
    load_released_state(model, state)
    model.to(device=dev, dtype=dt).eval()
    return model, OpenVLAProcessor(config, read_tokenizer(path))


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
