"""Configuration of the native OpenVLA model (fused DINOv2 + SigLIP -> MLP projector -> Llama).

:class:`OpenVLAConfig` holds the keyword arguments of the three transformers building blocks
(``Dinov2WithRegistersConfig``, ``SiglipVisionConfig``, ``LlamaConfig``) plus OpenVLA's action
interface (bins, dataset statistics, prompt suffix token, image pipeline, center crop). It
validates itself in
``__post_init__`` and derives the patch count, the fused vision width and the text vocabulary
size. :meth:`OpenVLAConfig.from_released` converts the ``config.json`` of the released
``openvla/openvla-7b`` checkpoints (timm model ids, ``text_config``, ``norm_stats``).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from embodied.config import Rule, checked, config_from_dict, config_to_dict, validate
from embodied.errors import CheckpointError, ConfigError

DINO_MEAN = (0.485, 0.456, 0.406)
DINO_STD = (0.229, 0.224, 0.225)
SIGLIP_MEAN = (0.5, 0.5, 0.5)
SIGLIP_STD = (0.5, 0.5, 0.5)

TIMM_BACKBONES: dict[str, dict[str, Any]] = {
    "vit_large_patch14_reg4_dinov2.lvd142m": {
        "hidden_size": 1024,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "mlp_ratio": 4,
        "patch_size": 14,
        "num_register_tokens": 4,
        "layerscale_value": 1e-5,
    },
    "vit_so400m_patch14_siglip_224": {
        "hidden_size": 1152,
        "intermediate_size": 4304,
        "num_hidden_layers": 27,
        "num_attention_heads": 16,
        "patch_size": 14,
        # timm builds this ViT with exact nn.GELU (OpenVLA's timm_override_act_layers: None).
        "hidden_act": "gelu",
    },
}
"""timm model id of a released Prismatic backbone -> transformers config kwargs."""

LLAMA2_7B: dict[str, Any] = {
    "vocab_size": 32064,
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 32000,
    "tie_word_embeddings": False,
}
"""Llama-2-7B text config, the default under a released checkpoint's ``text_config``."""

LLAMA_SPACE_TOKEN_ID = 29871
"""Llama-2's empty ``'▁'`` token that OpenVLA appends after ``Out:`` at inference."""

IMAGE_PIPELINES: dict[str, str] = {
    "resize": "camera frame as given; optional center crop of crop_area, bicubic resize to "
    "image_size (any env; the default)",
    "libero_reference": "LIBERO's raw upside-down agentview frame -> OpenVLA's LIBERO evaluation "
    "image: rotate 180 degrees, JPEG round trip (quality 95), TensorFlow lanczos3 antialiased "
    "resize, optional center crop of crop_area resized back bilinearly; the reference pipeline "
    "of openvla/openvla's run_libero_eval.py, reproduced bit for bit without TensorFlow",
}
"""How :class:`~policies.openvla.processor_openvla.ImageProcessor` turns a frame into pixels."""


def _norm_stats_action_dim(norm_stats: dict[str, Any]) -> dict[str, int]:
    dims: dict[str, int] = {}
    for key, stats in norm_stats.items():
        action = stats.get("action") if isinstance(stats, dict) else None
        if not isinstance(action, dict) or "q01" not in action or "q99" not in action:
            raise ConfigError(
                f"norm_stats[{key!r}] lacks action q01/q99: {sorted(action or {})}",
                fix="store {'action': {'q01': [...], 'q99': [...], 'mask': [...]}} per dataset",
            )
        for name in ("q01", "q99"):
            values = action[name]
            finite = isinstance(values, list | tuple) and all(
                isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                for v in values
            )
            if not finite or not values:
                raise ConfigError(
                    f"norm_stats[{key!r}].action.{name} is {str(values)[:80]}, not a list of "
                    "finite numbers",
                    fix="restore the checkpoint's action statistics",
                )
        mask = action.get("mask", [True] * len(action["q01"]))
        if not isinstance(mask, list | tuple) or not all(isinstance(m, bool | int) for m in mask):
            raise ConfigError(
                f"norm_stats[{key!r}].action.mask is {str(mask)[:80]}, not a list of booleans",
                fix="restore the checkpoint's action statistics",
            )
        n = len(action["q01"])
        if len(action["q99"]) != n or len(mask) != n:
            raise ConfigError(f"norm_stats[{key!r}] q01/q99/mask lengths differ")
        dims[key] = n
    return dims


def _backbone_rules(label: str) -> tuple[Rule, ...]:
    """The rules of the backbone config ``label`` (``dino`` or ``siglip``)."""

    def sub(config: OpenVLAConfig) -> dict[str, Any]:
        return dict(getattr(config, label))

    return (
        Rule(
            "image_size",
            lambda c: c.image_size % int(sub(c)["patch_size"]) == 0,
            lambda c: f"is not a multiple of the {label} patch size {sub(c)['patch_size']}",
            "pick an image_size divisible by both patch sizes",
        ),
        Rule(
            f"{label}.hidden_size",
            lambda c: sub(c)["hidden_size"] % sub(c)["num_attention_heads"] == 0,
            lambda c: f"is not divisible by num_attention_heads={sub(c)['num_attention_heads']}",
            "use the released backbone's sizes",
        ),
        Rule(
            f"{label}.num_hidden_layers",
            lambda c: int(sub(c)["num_hidden_layers"]) >= 2,
            "must be >= 2 (features come from the second-to-last layer)",
            "use the released backbone's layers (or at least 2)",
        ),
    )


@dataclass
class OpenVLAConfig:
    """Architecture and action interface of an OpenVLA model.

    Args:
        dino: ``Dinov2WithRegistersConfig`` kwargs of the first ("featurizer") backbone.
        siglip: ``SiglipVisionConfig`` kwargs of the fused backbone.
        text: ``LlamaConfig`` kwargs; ``vocab_size`` includes the pad-to-multiple rows.
        image_size: Square input side in pixels (224 for released checkpoints).
        pad_to_multiple_of: Rows added to the tokenizer's vocabulary (OpenVLA: 64); the text
            vocabulary is ``text["vocab_size"] - pad_to_multiple_of``.
        n_action_bins: Uniform bins on [-1, 1] (OpenVLA: 256).
        norm_stats: Dataset name -> ``{"action": {"q01", "q99", "mask", ...}}``.
        action_prefix_token_id: Token appended after the prompt before decoding
            (Llama-2 ``'▁'`` = 29871 for released checkpoints; None for our tokenizers).
        center_crop: Center-crop the image to ``crop_area`` of its area, then resize back
            (what LIBERO fine-tuned checkpoints were trained with).
        crop_area: Area fraction kept by the center crop (0.9 for LIBERO).
        image_pipeline: How a camera frame becomes the model's image (:data:`IMAGE_PIPELINES`):
            ``"resize"`` (default, any env) or ``"libero_reference"``, OpenVLA's LIBERO
            evaluation preprocessing applied to LIBERO's raw frames (the reference for LIBERO
            fine-tuned checkpoints; matches OpenVLA's TensorFlow code exactly).
        image_means: Per-backbone normalisation means (DINOv2, SigLIP).
        image_stds: Per-backbone normalisation stds.
        name: Free-form model name for reports.
    """

    config_name: ClassVar[str] = "OpenVLA config"

    dino: dict[str, Any] = field(default_factory=dict)
    siglip: dict[str, Any] = field(default_factory=dict)
    text: dict[str, Any] = field(default_factory=dict)
    image_size: int = checked(224, gt=0, fix="use e.g. 224 (released checkpoints)")
    pad_to_multiple_of: int = checked(64, ge=0, fix="use the tokenizer's padding (OpenVLA: 64)")
    n_action_bins: int = checked(256, ge=2, fix="use e.g. 256 (OpenVLA)")
    norm_stats: dict[str, Any] = field(default_factory=dict)
    action_prefix_token_id: int | None = None
    center_crop: bool = False
    crop_area: float = checked(0.9, gt=0, le=1, fix="use e.g. 0.9 (LIBERO)")
    image_pipeline: str = checked(
        "resize",
        choices=tuple(IMAGE_PIPELINES),
        fix="use 'libero_reference' for LIBERO's raw frames, 'resize' otherwise",
    )
    image_means: tuple[tuple[float, float, float], ...] = checked(
        (DINO_MEAN, SIGLIP_MEAN), min_len=2, max_len=2, fix="give one triple per backbone (2)"
    )
    image_stds: tuple[tuple[float, float, float], ...] = checked(
        (DINO_STD, SIGLIP_STD), min_len=2, max_len=2, fix="give one triple per backbone (2)"
    )
    name: str = "openvla"

    rules: ClassVar[tuple[Rule, ...]] = (
        *_backbone_rules("dino"),
        *_backbone_rules("siglip"),
        Rule(
            "dino.patch_size",
            lambda c: c.dino["patch_size"] == c.siglip["patch_size"],
            "!= siglip patch {siglip[patch_size]}: fused features are concatenated per patch",
            "use the same patch size for both backbones",
        ),
        Rule(
            "n_action_bins",
            lambda c: c.text_vocab_size > c.n_action_bins,
            "must be below the text vocabulary {text_vocab_size} (= vocab_size "
            "{text[vocab_size]} - pad_to_multiple_of {pad_to_multiple_of})",
            "grow the tokenizer vocabulary",
        ),
    )

    def __post_init__(self) -> None:
        self.dino = {**TIMM_BACKBONES["vit_large_patch14_reg4_dinov2.lvd142m"], **self.dino}
        self.siglip = {**TIMM_BACKBONES["vit_so400m_patch14_siglip_224"], **self.siglip}
        self.text = {**LLAMA2_7B, **self.text}
        self.image_means = tuple(tuple(float(v) for v in m) for m in self.image_means)  # type: ignore[misc]
        self.image_stds = tuple(tuple(float(v) for v in s) for s in self.image_stds)  # type: ignore[misc]
        validate(self)
        _norm_stats_action_dim(self.norm_stats)

    # ----- derived -----
    @property
    def grid(self) -> int:
        """Patches per image side."""
        return self.image_size // int(self.dino["patch_size"])

    @property
    def num_patches(self) -> int:
        """Image tokens inserted after BOS."""
        return self.grid * self.grid

    @property
    def vision_dim(self) -> int:
        """Width of the channel-concatenated DINOv2 + SigLIP patch features."""
        return int(self.dino["hidden_size"]) + int(self.siglip["hidden_size"])

    @property
    def llm_dim(self) -> int:
        """Hidden size of the language model (residual stream width)."""
        return int(self.text["hidden_size"])

    @property
    def text_vocab_size(self) -> int:
        """Tokenizer vocabulary without padding rows; action ids are its last n_action_bins."""
        return int(self.text["vocab_size"]) - int(self.pad_to_multiple_of)

    def action_dim(self, unnorm_key: str | None = None) -> int:
        """Action tokens decoded per step for dataset ``unnorm_key``."""
        key = self.resolve_unnorm_key(unnorm_key)
        return len(self.norm_stats[key]["action"]["q01"])

    def resolve_unnorm_key(self, unnorm_key: str | None) -> str:
        """Return the dataset key whose statistics un-normalise actions.

        Raises:
            ConfigError: ``unnorm_key`` is None with several datasets, or unknown; the
                message lists the available keys.
        """
        keys = sorted(self.norm_stats)
        if not keys:
            raise ConfigError(
                "the checkpoint has no action statistics (config.json's norm_stats is empty "
                "and no dataset_statistics.json lies beside it)",
                fix="restore norm_stats in config.json (`embodied train vla` writes them) or "
                "add dataset_statistics.json",
            )
        if unnorm_key is None:
            if len(keys) != 1:
                raise ConfigError(
                    f"the model was trained on {len(keys)} datasets; unnorm_key is ambiguous. "
                    f"Available keys: {keys}",
                    fix="pass --unnorm-key with one of the available keys",
                )
            return keys[0]
        if unnorm_key not in self.norm_stats:
            raise ConfigError(
                f"unknown unnorm_key {unnorm_key!r}; available keys: {keys}",
                fix="pass one of the available keys",
            )
        return unnorm_key

    # ----- (de)serialisation -----
    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (our checkpoint format)."""
        return config_to_dict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OpenVLAConfig:
        """Inverse of :meth:`to_dict`; unknown fields are refused."""
        return config_from_dict(cls, copy.deepcopy(d), what="OpenVLA config", error=CheckpointError)

    @classmethod
    def from_released(
        cls, cfg: dict[str, Any], preprocessor: dict[str, Any] | None = None
    ) -> OpenVLAConfig:
        """Convert a released Prismatic/OpenVLA ``config.json`` (and preprocessor config).

        Raises:
            CheckpointError: not a fused DINOv2+SigLIP model, or unknown timm ids.
        """
        if not cfg.get("use_fused_vision_backbone", False):
            raise CheckpointError(
                f"checkpoint {cfg.get('vision_backbone_id')!r} has no fused vision backbone; "
                "only fused DINOv2 + SigLIP OpenVLA checkpoints are supported"
            )
        ids = list(cfg.get("timm_model_ids", []))
        unknown = [i for i in ids if i not in TIMM_BACKBONES]
        if len(ids) != 2 or unknown:
            raise CheckpointError(
                f"unsupported timm backbones {ids}; supported: {sorted(TIMM_BACKBONES)}"
            )
        sizes = list(cfg.get("image_sizes", [224, 224]))
        if len(set(sizes)) != 1:
            raise CheckpointError(f"backbones use different image sizes {sizes}")
        text = dict(cfg.get("text_config") or {})
        for drop in ("model_type", "architectures", "torch_dtype", "_name_or_path"):
            text.pop(drop, None)
        means: Any = (DINO_MEAN, SIGLIP_MEAN)
        stds: Any = (DINO_STD, SIGLIP_STD)
        if preprocessor:
            means = preprocessor.get("means", means)
            stds = preprocessor.get("stds", stds)
        llm_id = str(cfg.get("llm_backbone_id", "llama2-7b-pure"))
        # Non-standard sizes (our tiny exports) travel in an extra field; released configs lack it.
        sizes_override = cfg.get("embodied_vision_configs") or {}
        return cls(
            dino={**TIMM_BACKBONES[ids[0]], **sizes_override.get("dino", {})},
            siglip={**TIMM_BACKBONES[ids[1]], **sizes_override.get("siglip", {})},
            text=text,
            image_size=int(sizes[0]),
            pad_to_multiple_of=int(cfg.get("pad_to_multiple_of", 64)),
            n_action_bins=int(cfg.get("n_action_bins", 256)),
            norm_stats=copy.deepcopy(cfg.get("norm_stats") or {}),
            action_prefix_token_id=LLAMA_SPACE_TOKEN_ID if llm_id.startswith("llama2") else None,
            image_means=means,
            image_stds=stds,
            name=str(cfg.get("_name_or_path") or cfg.get("name") or "openvla-released"),
        )

    def to_released(self) -> dict[str, Any]:
        """A released-style ``config.json`` for this architecture (used by tests/exports)."""
        return {
            "model_type": "openvla",
            "architectures": ["OpenVLAForActionPrediction"],
            "vision_backbone_id": "dinosiglip-vit-so-224px",
            "llm_backbone_id": "llama2-7b-pure"
            if self.action_prefix_token_id == LLAMA_SPACE_TOKEN_ID
            else "llama-custom",
            "arch_specifier": "no-align+fused-gelu-mlp",
            "use_fused_vision_backbone": True,
            "image_resize_strategy": "resize-naive",
            "timm_model_ids": list(TIMM_BACKBONES),
            "image_sizes": [self.image_size, self.image_size],
            "pad_to_multiple_of": self.pad_to_multiple_of,
            "n_action_bins": self.n_action_bins,
            "norm_stats": copy.deepcopy(self.norm_stats),
            "text_config": {"model_type": "llama", **self.text},
            "embodied_vision_configs": {"dino": dict(self.dino), "siglip": dict(self.siglip)},
        }

    # ----- presets -----
    @classmethod
    def openvla_7b(cls, **overrides: Any) -> OpenVLAConfig:
        """The released openvla-7b architecture (random init; weights come from a checkpoint)."""
        return cls(action_prefix_token_id=LLAMA_SPACE_TOKEN_ID, name="openvla-7b", **overrides)

    @classmethod
    def tiny(cls, vocab_size: int = 448, **overrides: Any) -> OpenVLAConfig:
        """A CPU-sized model of the same classes: 64 px images, 8 px patches, 2-layer Llama.

        Args:
            vocab_size: Text vocabulary incl. the 64 padding rows (tokenizer size + 64).
            **overrides: Any other field.
        """
        base: dict[str, Any] = {
            "dino": {
                "hidden_size": 48,
                "num_hidden_layers": 3,
                "num_attention_heads": 2,
                "mlp_ratio": 2,
                "patch_size": 8,
                "num_register_tokens": 4,
                "layerscale_value": 1.0,
            },
            "siglip": {
                "hidden_size": 48,
                "intermediate_size": 96,
                "num_hidden_layers": 3,
                "num_attention_heads": 2,
                "patch_size": 8,
                "hidden_act": "gelu",
            },
            "text": {
                "vocab_size": vocab_size,
                "hidden_size": 96,
                "intermediate_size": 192,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 4,
                "max_position_embeddings": 256,
                "rms_norm_eps": 1e-5,
                "bos_token_id": 1,
                "eos_token_id": 2,
                "pad_token_id": vocab_size - 64,
            },
            "image_size": 64,
            "name": "openvla-tiny",
        }
        for key in ("dino", "siglip", "text"):
            base[key].update(overrides.pop(key, {}))
        base.update(overrides)
        return cls(**base)


BC_SAMPLING = ("steps", "episodes")
"""How :class:`BCSettings` draws a batch's demonstration steps."""


@dataclass
class BCSettings:
    """Behaviour-cloning hyperparameters.

    Args:
        steps: Optimiser steps.
        batch_size: Samples per step.
        lr: Peak AdamW learning rate (cosine decay after a 5 % warm-up).
        weight_decay: AdamW weight decay.
        grad_clip: Gradient-norm clip.
        seed: Sampling seed.
        log_every: Steps between progress callbacks.
        sampling: How a batch draws its steps: ``steps`` (uniformly over all steps, OpenVLA's
            default) or ``episodes`` (an episode uniformly, then a step in it; ours: a slow
            demonstration has more steps than a fast one, so under ``steps`` the frames the
            model sees over-weight slow episodes and an unnamed prompt decodes near the slowest
            speed; on the steering dial it did not help, see docs/openvla-steering.md).
        ordinal_words: Words of an ordered scale (e.g. "1" .. "9" of "at speed k") whose input
            embeddings train tied to one line, evenly spaced in this order: row k is
            ``base + c_k * step`` with ``c`` from -1 to 1 (ours: separate token embeddings
            give a concept no line a steering direction could follow; tied, a point between
            two words is a speed between theirs). Empty: every embedding is free (OpenVLA's).
    """

    config_name: ClassVar[str] = "BC settings"

    steps: int = checked(1500, gt=0, fix="use e.g. 1500")
    batch_size: int = checked(32, gt=0, fix="use e.g. 32")
    lr: float = checked(1e-3, gt=0, fix="use e.g. 1e-3")
    weight_decay: float = checked(0.01, ge=0, fix="use e.g. 0.01")
    grad_clip: float = checked(1.0, ge=0, fix="use e.g. 1.0")
    seed: int = 0
    log_every: int = checked(100, gt=0, fix="use e.g. 100")
    sampling: str = checked(
        "steps", choices=BC_SAMPLING, fix="use steps (uniform over steps) or episodes"
    )
    ordinal_words: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        validate(self)
