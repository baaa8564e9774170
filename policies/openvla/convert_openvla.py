"""Remap released OpenVLA checkpoints (timm ViT naming) onto the native transformers modules.

Released ``openvla/openvla-7b`` parameters (Prismatic HF export)::

    vision_backbone.featurizer.*        timm ViT-L/14 DINOv2 reg4  -> Dinov2WithRegistersModel
    vision_backbone.fused_featurizer.*  timm ViT-SO400M/14 SigLIP  -> SiglipVisionModel
    projector.fc1/fc2/fc3.*             identical
    language_model.model.* / lm_head.*  identical (LlamaForCausalLM)

timm -> transformers per ViT: fused ``attn.qkv`` splits into q/k/v projections; LayerScale
``ls1/ls2.scale_factor`` (``.gamma`` in plain timm) -> ``layer_scale1/2.lambda1``;
``reg_token`` -> ``register_tokens``; DINOv2 ``pos_embed`` (patch positions only) gains a zero
CLS row; SigLIP ``pos_embed`` -> ``position_embedding.weight``; SigLIP ``attn_pool`` ->
``head`` (q and kv fused into ``in_proj``). Every source key must map and every native key
must be covered (except unused ones like DINOv2's ``mask_token``), or loading is refused
with the offending names listed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import torch
from torch import nn

from embodied.errors import CheckpointError

Tensor = torch.Tensor
DINO = "vision_backbone.featurizer."
SIG = "vision_backbone.fused_featurizer."

OPTIONAL_NATIVE = (
    re.compile(r"^vision_backbone\.featurizer\.embeddings\.mask_token$"),
    # Unused by second-to-last-layer features; a checkpoint may omit them (timm heads).
    re.compile(r"^vision_backbone\.featurizer\.layernorm\."),
    re.compile(r"^vision_backbone\.fused_featurizer\.(vision_model\.)?(head|post_layernorm)\."),
)
"""Native parameters a released checkpoint need not carry (unused at inference)."""


def _names(model: nn.Module) -> tuple[str, str]:
    """Installed-transformers naming: (siglip prefix inside fused_featurizer, dino attn style)."""
    keys = model.state_dict().keys()
    sig_key = next(k for k in keys if k.startswith(SIG) and k.endswith("patch_embedding.weight"))
    sig_prefix = sig_key[len(SIG) : -len("embeddings.patch_embedding.weight")]
    dino_new = any(k.startswith(DINO) and ".attention.q_proj." in k for k in keys)
    return sig_prefix, "new" if dino_new else "old"


def _dino_attn(style: str) -> dict[str, str]:
    if style == "new":
        return {
            "q": "attention.q_proj",
            "k": "attention.k_proj",
            "v": "attention.v_proj",
            "o": "attention.o_proj",
        }
    return {
        "q": "attention.attention.query",
        "k": "attention.attention.key",
        "v": "attention.attention.value",
        "o": "attention.output.dense",
    }


def released_to_native(
    state: Mapping[str, Tensor], model: nn.Module
) -> tuple[dict[str, Tensor], list[str]]:
    """Map a released state dict onto ``model``'s parameter names.

    Returns:
        ``(native_state, unmapped_source_keys)``.
    """
    sig_prefix, style = _names(model)
    attn = _dino_attn(style)
    out: dict[str, Tensor] = {}
    unmapped: list[str] = []
    pending_pool: dict[str, Tensor] = {}
    for key, val in state.items():
        if key.startswith(("projector.", "language_model.")):
            out[key] = val
        elif key.startswith(DINO):
            if not _map_dino(key[len(DINO) :], val, out, attn):
                unmapped.append(key)
        elif key.startswith(SIG):
            sub = key[len(SIG) :]
            if sub.startswith("attn_pool.") and sub.split(".")[1] in ("q", "kv"):
                pending_pool[sub] = val
            elif not _map_siglip(sub, val, out, SIG + sig_prefix):
                unmapped.append(key)
        else:
            unmapped.append(key)
    if pending_pool:
        head = SIG + sig_prefix + "head.attention."
        for p in ("weight", "bias"):
            q, kv = (
                pending_pool.pop(f"attn_pool.q.{p}", None),
                pending_pool.pop(f"attn_pool.kv.{p}", None),
            )
            if q is not None and kv is not None:
                out[head + f"in_proj_{p}"] = torch.cat([q, kv], 0)
            else:
                unmapped += [
                    SIG + f"attn_pool.{n}.{p}" for n, t in (("q", q), ("kv", kv)) if t is not None
                ]
        unmapped += [SIG + k for k in pending_pool]
    return out, unmapped


def _split_qkv(val: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    q, k, v = val.chunk(3, dim=0)
    return q, k, v


_BLOCK = re.compile(r"^blocks\.(\d+)\.(.+)$")
_DINO_NORMS = ("norm1", "norm2")
_DINO_LAYER_SCALE = {
    "ls1.scale_factor": "layer_scale1.lambda1",
    "ls2.scale_factor": "layer_scale2.lambda1",
}
"""timm LayerScale -> native (DINOv2); plain timm names the scales ``.gamma`` (read too)."""
_DINO_LAYER_SCALE_IN = _DINO_LAYER_SCALE | {
    "ls1.gamma": "layer_scale1.lambda1",
    "ls2.gamma": "layer_scale2.lambda1",
}
_SIGLIP_ATTN = {n: f"self_attn.{n}_proj" for n in "qkv"} | {"o": "self_attn.out_proj"}
_SIGLIP_NORMS = ("layer_norm1", "layer_norm2")


def _block_pairs(attn: Mapping[str, str], norms: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    """timm block -> native layer names of the per-block weight/bias pairs (bar fused qkv)."""
    return (
        ("attn.proj", attn["o"]),
        ("norm1", norms[0]),
        ("norm2", norms[1]),
        ("mlp.fc1", "mlp.fc1"),
        ("mlp.fc2", "mlp.fc2"),
    )


def _map_block(
    rest: str,
    val: Tensor,
    out: dict[str, Tensor],
    lp: str,
    attn: Mapping[str, str],
    norms: tuple[str, str],
    per_layer: Mapping[str, str] | None = None,
) -> bool:
    """Map timm block parameter ``rest`` onto native layer prefix ``lp``; False if unknown."""
    table = {
        f"{a}.{kind}": f"{b}.{kind}"
        for a, b in _block_pairs(attn, norms)
        for kind in ("weight", "bias")
    } | dict(per_layer or {})
    if rest in table:
        out[lp + table[rest]] = val
        return True
    if rest in ("attn.qkv.weight", "attn.qkv.bias"):
        kind = rest.rsplit(".", 1)[1]
        for name, part in zip("qkv", _split_qkv(val), strict=True):
            out[f"{lp}{attn[name]}.{kind}"] = part
        return True
    return False


def _map_dino(sub: str, val: Tensor, out: dict[str, Tensor], attn: dict[str, str]) -> bool:
    p = DINO
    direct = {
        "cls_token": "embeddings.cls_token",
        "reg_token": "embeddings.register_tokens",
        "patch_embed.proj.weight": "embeddings.patch_embeddings.projection.weight",
        "patch_embed.proj.bias": "embeddings.patch_embeddings.projection.bias",
        "norm.weight": "layernorm.weight",
        "norm.bias": "layernorm.bias",
    }
    if sub in direct:
        out[p + direct[sub]] = val
        return True
    if sub == "pos_embed":  # timm no_embed_class: patch positions only; CLS gets none
        out[p + "embeddings.position_embeddings"] = torch.cat(
            [torch.zeros_like(val[:, :1]), val], 1
        )
        return True
    m = _BLOCK.match(sub)
    if not m:
        return False
    lp = f"{p}encoder.layer.{m.group(1)}."
    return _map_block(m.group(2), val, out, lp, attn, _DINO_NORMS, _DINO_LAYER_SCALE_IN)


def _map_siglip(sub: str, val: Tensor, out: dict[str, Tensor], p: str) -> bool:
    direct = {
        "patch_embed.proj.weight": "embeddings.patch_embedding.weight",
        "patch_embed.proj.bias": "embeddings.patch_embedding.bias",
        "norm.weight": "post_layernorm.weight",
        "norm.bias": "post_layernorm.bias",
        "attn_pool.latent": "head.probe",
        "attn_pool.proj.weight": "head.attention.out_proj.weight",
        "attn_pool.proj.bias": "head.attention.out_proj.bias",
        "attn_pool.norm.weight": "head.layernorm.weight",
        "attn_pool.norm.bias": "head.layernorm.bias",
        "attn_pool.mlp.fc1.weight": "head.mlp.fc1.weight",
        "attn_pool.mlp.fc1.bias": "head.mlp.fc1.bias",
        "attn_pool.mlp.fc2.weight": "head.mlp.fc2.weight",
        "attn_pool.mlp.fc2.bias": "head.mlp.fc2.bias",
    }
    if sub in direct:
        out[p + direct[sub]] = val
        return True
    if sub == "pos_embed":
        out[p + "embeddings.position_embedding.weight"] = val[0]
        return True
    m = _BLOCK.match(sub)
    if not m:
        return False
    lp = f"{p}encoder.layers.{m.group(1)}."
    return _map_block(m.group(2), val, out, lp, _SIGLIP_ATTN, _SIGLIP_NORMS)


def _blocks_to_released(
    state: Mapping[str, Tensor],
    out: dict[str, Tensor],
    layers: str,
    blocks: str,
    attn: Mapping[str, str],
    norms: tuple[str, str],
    per_layer: Mapping[str, str] | None = None,
) -> None:
    """Write native transformer layers ``{layers}{i}.*`` as timm blocks ``{blocks}{i}.*`` into ``out``.

    Args:
        state: Native state dict.
        out: Released-name state dict being built (written in place).
        layers: Native prefix of the layer list, e.g. ``"...encoder.layer."``.
        blocks: timm prefix of the block list, e.g. ``"...blocks."``.
        attn: Native names (inside a layer) of the ``"q"``, ``"k"``, ``"v"`` and ``"o"`` projections.
        norms: Native names of timm's ``norm1`` and ``norm2``.
        per_layer: Extra timm -> native names copied once per layer (no weight/bias suffix).
    """
    n_layers = 1 + max(
        int(m.group(1)) for k in state if (m := re.match(re.escape(layers) + r"(\d+)\.", k))
    )
    for i in range(n_layers):
        lp, bp = f"{layers}{i}.", f"{blocks}{i}."
        for kind in ("weight", "bias"):
            out[bp + f"attn.qkv.{kind}"] = torch.cat(
                [state[f"{lp}{attn[n]}.{kind}"] for n in "qkv"]
            )
            for a, b in _block_pairs(attn, norms):
                out[bp + f"{a}.{kind}"] = state[f"{lp}{b}.{kind}"]
        for a, b in (per_layer or {}).items():
            out[bp + a] = state[lp + b]


def native_to_released(model: nn.Module) -> dict[str, Tensor]:
    """``model``'s parameters under the released (timm) names; inverse of :func:`released_to_native`."""
    sig_prefix, style = _names(model)
    state = {k: v.detach() for k, v in model.state_dict().items()}
    out: dict[str, Tensor] = {}
    sp = SIG + sig_prefix
    for k, v in state.items():
        if k.startswith(("projector.", "language_model.")):
            out[k] = v
    d = DINO
    out[d + "cls_token"] = state[d + "embeddings.cls_token"]
    out[d + "reg_token"] = state[d + "embeddings.register_tokens"]
    out[d + "pos_embed"] = state[d + "embeddings.position_embeddings"][:, 1:]
    out[d + "patch_embed.proj.weight"] = state[d + "embeddings.patch_embeddings.projection.weight"]
    out[d + "patch_embed.proj.bias"] = state[d + "embeddings.patch_embeddings.projection.bias"]
    out[d + "norm.weight"] = state[d + "layernorm.weight"]
    out[d + "norm.bias"] = state[d + "layernorm.bias"]
    _blocks_to_released(
        state,
        out,
        layers=d + "encoder.layer.",
        blocks=d + "blocks.",
        attn=_dino_attn(style),
        norms=_DINO_NORMS,
        per_layer=_DINO_LAYER_SCALE,
    )
    s = SIG
    out[s + "pos_embed"] = state[sp + "embeddings.position_embedding.weight"][None]
    out[s + "patch_embed.proj.weight"] = state[sp + "embeddings.patch_embedding.weight"]
    out[s + "patch_embed.proj.bias"] = state[sp + "embeddings.patch_embedding.bias"]
    out[s + "norm.weight"] = state[sp + "post_layernorm.weight"]
    out[s + "norm.bias"] = state[sp + "post_layernorm.bias"]
    if sp + "head.probe" in state:
        hd = state[sp + "head.attention.in_proj_weight"].shape[1]
        out[s + "attn_pool.latent"] = state[sp + "head.probe"]
        for kind in ("weight", "bias"):
            w = state[sp + f"head.attention.in_proj_{kind}"]
            out[s + f"attn_pool.q.{kind}"], out[s + f"attn_pool.kv.{kind}"] = w[:hd], w[hd:]
            out[s + f"attn_pool.proj.{kind}"] = state[sp + f"head.attention.out_proj.{kind}"]
            out[s + f"attn_pool.norm.{kind}"] = state[sp + f"head.layernorm.{kind}"]
            out[s + f"attn_pool.mlp.fc1.{kind}"] = state[sp + f"head.mlp.fc1.{kind}"]
            out[s + f"attn_pool.mlp.fc2.{kind}"] = state[sp + f"head.mlp.fc2.{kind}"]
    _blocks_to_released(
        state,
        out,
        layers=sp + "encoder.layers.",
        blocks=s + "blocks.",
        attn=_SIGLIP_ATTN,
        norms=_SIGLIP_NORMS,
    )
    return {k: v.contiguous() for k, v in out.items()}


def load_released_state(
    model: nn.Module,
    state: Mapping[str, Tensor],
    optional: tuple[re.Pattern[str], ...] = OPTIONAL_NATIVE,
    log: Callable[[str], None] | None = None,
) -> None:
    """Remap ``state`` (released naming) and load it into ``model`` strictly.

    Raises:
        CheckpointError: source keys that map nowhere, native keys left uncovered, or shape
            mismatches; each listed by name.
    """
    native, unmapped = released_to_native(state, model)
    own = model.state_dict()
    unknown_targets = sorted(k for k in native if k not in own)
    if unmapped or unknown_targets:
        bad = unmapped + unknown_targets
        raise CheckpointError(
            f"{len(bad)} checkpoint key(s) do not map onto the native OpenVLA model: "
            f"{bad[:25]}{' ...' if len(bad) > 25 else ''}",
            fix="use an openvla/openvla-7b-style checkpoint (fused DINOv2+SigLIP, Llama-2)",
        )
    missing = sorted(k for k in own if k not in native and not any(p.match(k) for p in optional))
    if missing:
        raise CheckpointError(
            f"checkpoint lacks {len(missing)} parameter(s): {missing[:25]}"
            f"{' ...' if len(missing) > 25 else ''}",
            fix="the checkpoint is incomplete or for a different architecture/config",
        )
    shapes = [
        f"{k}: checkpoint {tuple(v.shape)} vs model {tuple(own[k].shape)}"
        for k, v in native.items()
        if tuple(v.shape) != tuple(own[k].shape)
    ]
    if shapes:
        raise CheckpointError(
            f"shape mismatch in {len(shapes)} parameter(s): {shapes[:10]}",
            fix="the config.json does not describe these weights",
        )
    model.load_state_dict(native, strict=False)
    if log is not None:
        log(f"loaded {len(native)} tensors ({len(state)} checkpoint keys)")
