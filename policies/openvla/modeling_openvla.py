"""Native OpenVLA from transformers building blocks (no ``trust_remote_code``).

Architecture (as released in ``openvla/openvla-7b``)::

    pixel_values (B, 6, H, W) --split--> DINOv2-with-registers (Dinov2WithRegistersModel)
                                         SigLIP (SiglipVisionModel)
        second-to-last layer patch tokens of each, concatenated channel-wise (B, P, Dd + Ds)
    -> projector fc1 (4x) -> GELU -> fc2 -> GELU -> fc3      (B, P, llm_dim)
    -> Llama (LlamaForCausalLM) on [BOS][patches][prompt tokens]
    -> greedy decoding of action tokens (KV cache).

Module attribute names mirror the released checkpoint (``vision_backbone.featurizer``,
``vision_backbone.fused_featurizer``, ``projector.fc1..3``, ``language_model``), so only the
inner ViT names need remapping (see ``convert_openvla``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import (
    Dinov2WithRegistersConfig,
    Dinov2WithRegistersModel,
    LlamaConfig,
    LlamaForCausalLM,
    SiglipVisionConfig,
    SiglipVisionModel,
)

from policies.openvla.configuration_openvla import OpenVLAConfig

IGNORE_INDEX = -100


def siglip_core(model: nn.Module) -> Any:
    """The module holding ``embeddings``/``encoder`` in a ``SiglipVisionModel`` (any version)."""
    return getattr(model, "vision_model", model)


class PrismaticVisionBackbone(nn.Module):
    """Fused DINOv2-with-registers + SigLIP featurizer returning second-to-last-layer patches."""

    def __init__(self, config: OpenVLAConfig, attn_implementation: str = "sdpa") -> None:
        super().__init__()
        size = config.image_size
        dino_cfg = Dinov2WithRegistersConfig(image_size=size, **config.dino)
        sig_cfg = SiglipVisionConfig(image_size=size, **config.siglip)
        for c in (dino_cfg, sig_cfg):
            c._attn_implementation = attn_implementation
        self.featurizer = Dinov2WithRegistersModel(dino_cfg)
        self.fused_featurizer = SiglipVisionModel(sig_cfg)
        self.n_prefix = 1 + int(config.dino["num_register_tokens"])
        self.embed_dim = config.vision_dim
        # timm's DINOv2-reg4 adds no position embedding to the CLS token (no_embed_class);
        # keep the transformers CLS position at zero, also while training.
        pos = self.featurizer.embeddings.position_embeddings
        with torch.no_grad():
            pos[:, 0].zero_()
        pos.register_hook(lambda g: g.index_fill(1, torch.tensor([0], device=g.device), 0.0))

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """(B, 6, H, W) -> (B, num_patches, dino_dim + siglip_dim)."""
        img, img_fused = torch.split(pixel_values, [3, 3], dim=1)
        h = self.featurizer.embeddings(img)
        for layer in self.featurizer.encoder.layer[:-1]:
            h = _first(layer(h))
        sig = siglip_core(self.fused_featurizer)
        s = sig.embeddings(img_fused)
        for layer in sig.encoder.layers[:-1]:
            s = _first(layer(s, None))
        return torch.cat([h[:, self.n_prefix :], s], dim=2)


def _cache_arg(lm: nn.Module) -> str:
    """Name of the KV-cache argument (``cache`` in recent transformers, else ``past_key_values``)."""
    import inspect

    params = inspect.signature(lm.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _first(out: Any) -> torch.Tensor:
    return out[0] if isinstance(out, tuple) else out


class PrismaticProjector(nn.Module):
    """OpenVLA's fused-backbone projector: Linear(4x) -> GELU -> Linear -> GELU -> Linear."""

    def __init__(self, vision_dim: int, llm_dim: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(vision_dim, 4 * vision_dim, bias=True)
        self.fc2 = nn.Linear(4 * vision_dim, llm_dim, bias=True)
        self.fc3 = nn.Linear(llm_dim, llm_dim, bias=True)
        self.act_fn1 = nn.GELU()
        self.act_fn2 = nn.GELU()

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        """(B, P, vision_dim) -> (B, P, llm_dim)."""
        return self.fc3(self.act_fn2(self.fc2(self.act_fn1(self.fc1(patches)))))


class OpenVLAModel(nn.Module):
    """Vision backbone + projector + Llama, with multimodal embedding and greedy decoding.

    Args:
        config: Architecture and action interface.
        attn_implementation: ``"sdpa"`` (default) or ``"eager"``.
    """

    def __init__(self, config: OpenVLAConfig, attn_implementation: str = "sdpa") -> None:
        super().__init__()
        self.config = config
        self.vision_backbone = PrismaticVisionBackbone(config, attn_implementation)
        self.projector = PrismaticProjector(config.vision_dim, config.llm_dim)
        text_cfg = LlamaConfig(**config.text)
        text_cfg._attn_implementation = attn_implementation
        self.language_model = LlamaForCausalLM(text_cfg)

    # ----- structure -----
    @property
    def decoder_layers(self) -> nn.ModuleList:
        """The Llama decoder layers (residual stream hooks attach here)."""
        return self.language_model.model.layers  # type: ignore[no-any-return]

    @property
    def device(self) -> torch.device:
        """Device of the parameters."""
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        """Floating dtype of the parameters."""
        return next(self.parameters()).dtype

    # ----- inputs -----
    def embed(
        self,
        pixel_values: torch.Tensor,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        labels: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Build ``[pad..][BOS][patches][prompt..]`` embeddings for left-padded prompts.

        Args:
            pixel_values: (B, 6, H, W).
            input_ids: (B, T) left-padded token ids, each row starting with BOS after padding.
            attention_mask: (B, T) 1 for real tokens.
            labels: Optional (B, T) targets (IGNORE_INDEX where no loss).

        Returns:
            ``(inputs_embeds (B, T+P, D), attention_mask (B, T+P), position_ids (B, T+P),
            labels (B, T+P) or None)``.
        """
        patches = self.projector(self.vision_backbone(pixel_values.to(self.dtype)))
        tok = self.language_model.get_input_embeddings()(input_ids)
        b, t = input_ids.shape
        p = patches.shape[1]
        starts = (t - attention_mask.sum(1)).tolist()  # BOS index per row
        if len(set(starts)) == 1:
            s = int(starts[0])
            emb = torch.cat([tok[:, : s + 1], patches, tok[:, s + 1 :]], dim=1)
        else:
            emb = torch.cat(
                [
                    torch.cat(
                        [tok[i : i + 1, : s + 1], patches[i : i + 1], tok[i : i + 1, s + 1 :]], 1
                    )
                    for i, s in enumerate(int(x) for x in starts)
                ],
                dim=0,
            )
        ones = torch.ones((b, p), dtype=attention_mask.dtype, device=attention_mask.device)
        mask = torch.cat([attention_mask[:, :1], ones, attention_mask[:, 1:]], dim=1)
        if len(set(starts)) != 1:
            mask = torch.stack(
                [
                    torch.cat([attention_mask[i, : s + 1], ones[i], attention_mask[i, s + 1 :]])
                    for i, s in enumerate(int(x) for x in starts)
                ]
            )
        position_ids = (mask.cumsum(1) - 1).clamp(min=0)
        new_labels = None
        if labels is not None:
            ign = torch.full((b, p), IGNORE_INDEX, dtype=labels.dtype, device=labels.device)
            new_labels = torch.stack(
                [
                    torch.cat([labels[i, : s + 1], ign[i], labels[i, s + 1 :]])
                    for i, s in enumerate(int(x) for x in starts)
                ]
            )
        return emb, mask, position_ids, new_labels

    def forward(
        self,
        pixel_values: torch.Tensor,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        labels: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """Teacher-forced forward; returns ``logits`` and, with ``labels``, the mean token ``loss``."""
        emb, mask, pos, lab = self.embed(pixel_values, input_ids, attention_mask, labels)
        out = self.language_model(
            inputs_embeds=emb, attention_mask=mask, position_ids=pos, use_cache=False
        )
        result = {"logits": out.logits}
        if lab is not None:
            logits = out.logits[:, :-1].float()
            target = lab[:, 1:]
            result["loss"] = nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=IGNORE_INDEX
            )
            result["labels"] = lab
        return result

    @torch.inference_mode()
    def generate_tokens(
        self,
        pixel_values: torch.Tensor,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        max_new_tokens: int,
    ) -> torch.Tensor:
        """Greedy decoding of ``max_new_tokens`` tokens with a KV cache -> (B, max_new_tokens).

        The prefill runs the whole multimodal prompt; each further token is one cached step.
        """
        from transformers import DynamicCache

        emb, mask, pos, _ = self.embed(pixel_values, input_ids, attention_mask)
        lm = self.language_model
        cache_kw = {_cache_arg(lm): DynamicCache()}
        out = lm(
            inputs_embeds=emb,
            attention_mask=mask,
            position_ids=pos,
            use_cache=True,
            logits_to_keep=1,
            **cache_kw,
        )
        tokens = [out.logits[:, -1].argmax(-1)]
        ones = torch.ones((mask.shape[0], 1), dtype=mask.dtype, device=mask.device)
        for _ in range(max_new_tokens - 1):
            mask = torch.cat([mask, ones], dim=1)
            pos = pos[:, -1:] + 1
            out = lm(
                input_ids=tokens[-1][:, None],
                attention_mask=mask,
                position_ids=pos,
                use_cache=True,
                logits_to_keep=1,
                **cache_kw,
            )
            tokens.append(out.logits[:, -1].argmax(-1))
        return torch.stack(tokens, dim=1)

    def num_parameters(self) -> int:
        """Parameter count."""
        return sum(p.numel() for p in self.parameters())
