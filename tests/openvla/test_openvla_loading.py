"""Released-checkpoint remapping: timm-named weights load into the native model exactly."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from embodied.errors import CheckpointError
from policies.openvla.convert_openvla import native_to_released
from policies.openvla.loading_openvla import load_pretrained, save_pretrained
from policies.openvla.modeling_openvla import OpenVLAModel
from policies.openvla.processor_openvla import OpenVLAProcessor
from tests.openvla.conftest import tiny_config


def _timm_vit(
    sd: dict[str, torch.Tensor],
    pre: str,
    img: torch.Tensor,
    heads: int,
    n_prefix_tokens: int,
    layer_scale: bool,
) -> torch.Tensor:
    """timm ViT semantics written from the released keys: second-to-last block, patches only."""
    w = sd[pre + "patch_embed.proj.weight"]
    x = F.conv2d(img, w, sd[pre + "patch_embed.proj.bias"], stride=w.shape[-1])
    x = x.flatten(2).transpose(1, 2) + sd[pre + "pos_embed"]  # no_embed_class / no class token
    if n_prefix_tokens:
        b = x.shape[0]
        x = torch.cat(
            [sd[pre + "cls_token"].expand(b, -1, -1), sd[pre + "reg_token"].expand(b, -1, -1), x], 1
        )
    n_blocks = 1 + max(
        int(k[len(pre) :].split(".")[1]) for k in sd if k.startswith(pre + "blocks.")
    )
    d = x.shape[-1]

    def ln(t: torch.Tensor, n: str) -> torch.Tensor:
        return F.layer_norm(t, (d,), sd[n + ".weight"], sd[n + ".bias"], eps=1e-6)

    for i in range(n_blocks - 1):
        p = f"{pre}blocks.{i}."
        h = ln(x, p + "norm1")
        b, n, _ = h.shape
        qkv = (h @ sd[p + "attn.qkv.weight"].T + sd[p + "attn.qkv.bias"]).reshape(
            b, n, 3, heads, d // heads
        )
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-1, -2) * (d // heads) ** -0.5, -1) @ v
        h = (
            att.transpose(1, 2).reshape(b, n, d) @ sd[p + "attn.proj.weight"].T
            + sd[p + "attn.proj.bias"]
        )
        x = x + (h * sd[p + "ls1.scale_factor"] if layer_scale else h)
        h = ln(x, p + "norm2")
        h = F.gelu(h @ sd[p + "mlp.fc1.weight"].T + sd[p + "mlp.fc1.bias"])
        h = h @ sd[p + "mlp.fc2.weight"].T + sd[p + "mlp.fc2.bias"]
        x = x + (h * sd[p + "ls2.scale_factor"] if layer_scale else h)
    return x[:, n_prefix_tokens:]


def test_native_vision_matches_timm_semantics_of_released_keys(tiny: tuple) -> None:
    model, proc = tiny
    sd = native_to_released(model)
    pv = proc.images([np.random.default_rng(1).integers(0, 255, (80, 80, 3), dtype=np.uint8)])
    cfg = model.config
    ref = torch.cat(
        [
            _timm_vit(
                sd,
                "vision_backbone.featurizer.",
                pv[:, :3],
                cfg.dino["num_attention_heads"],
                1 + cfg.dino["num_register_tokens"],
                True,
            ),
            _timm_vit(
                sd,
                "vision_backbone.fused_featurizer.",
                pv[:, 3:],
                cfg.siglip["num_attention_heads"],
                0,
                False,
            ),
        ],
        dim=2,
    )
    with torch.no_grad():
        ours = model.vision_backbone(pv)
        # the manual loop equals transformers' own hidden_states[-2]
        full = model.vision_backbone.featurizer(pv[:, :3], output_hidden_states=True).hidden_states[
            -2
        ]
    assert ours.shape == (1, cfg.num_patches, cfg.vision_dim)
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(ours[..., : cfg.dino["hidden_size"]], full[:, 5:])


def test_released_key_naming() -> None:
    keys = set(native_to_released(OpenVLAModel(tiny_config())))
    for k in (
        "vision_backbone.featurizer.cls_token",
        "vision_backbone.featurizer.reg_token",
        "vision_backbone.featurizer.pos_embed",
        "vision_backbone.featurizer.blocks.0.attn.qkv.weight",
        "vision_backbone.featurizer.blocks.0.ls1.scale_factor",
        "vision_backbone.fused_featurizer.blocks.2.mlp.fc2.bias",
        "vision_backbone.fused_featurizer.attn_pool.kv.weight",
        "projector.fc1.weight",
        "projector.fc3.bias",
        "language_model.model.layers.1.mlp.down_proj.weight",
        "language_model.lm_head.weight",
    ):
        assert k in keys, k
    assert not any(".q_proj." in k and "vision" in k for k in keys)


@pytest.mark.parametrize("released_config", [True, False])
def test_save_released_naming_then_load_gives_equal_outputs(
    tiny: tuple, tmp_path: Path, released_config: bool
) -> None:
    model, proc = tiny
    path = save_pretrained(
        model, proc.tokenizer, tmp_path / "ckpt", released_config=released_config
    )
    keys = set(load_file(str(path / "model.safetensors")))
    assert "vision_backbone.featurizer.blocks.0.attn.qkv.weight" in keys
    cfg = json.loads((path / "config.json").read_text())
    assert ("model_type" in cfg) == released_config
    loaded, proc2 = load_pretrained(path, device="cpu", dtype="float32")
    imgs = [
        np.random.default_rng(i).integers(0, 255, (64, 64, 3), dtype=np.uint8) for i in range(2)
    ]
    instr = ["reach the red cube", "push the blue block to the left slowly"]
    pv = proc.images(imgs)
    ids, mask = proc.encode_prompts(instr)
    ids2, mask2 = proc2.encode_prompts(instr)
    assert torch.equal(ids, ids2) and torch.equal(mask, mask2)
    with torch.no_grad():
        assert torch.equal(model(pv, ids, mask)["logits"], loaded(pv, ids, mask)["logits"])
    assert torch.equal(
        model.generate_tokens(pv, ids, mask, 7), loaded.generate_tokens(pv, ids2, mask2, 7)
    )


def test_batched_generation_equals_one_by_one(tiny: tuple) -> None:
    model, proc = tiny
    imgs = [
        np.random.default_rng(i).integers(0, 255, (64, 64, 3), dtype=np.uint8) for i in range(3)
    ]
    instr = ["reach the red cube", "go to the blue ball quickly", "touch green"]
    ids, mask = proc.encode_prompts(instr)
    assert mask.sum(1).unique().numel() == 3  # really ragged (left padding exercised)
    batch = model.generate_tokens(proc.images(imgs), ids, mask, 7)
    for i in range(3):
        one_ids, one_mask = proc.encode_prompts([instr[i]])
        one = model.generate_tokens(proc.images([imgs[i]]), one_ids, one_mask, 7)
        assert torch.equal(one[0], batch[i]), i


def test_unmappable_or_missing_keys_are_refused_and_listed(tiny: tuple, tmp_path: Path) -> None:
    model, proc = tiny
    path = save_pretrained(model, proc.tokenizer, tmp_path / "ckpt")
    sd = load_file(str(path / "model.safetensors"))
    bad = dict(sd)
    bad["vision_backbone.featurizer.blocks.0.attn.rope.freqs"] = torch.zeros(2)
    bad["mystery.weight"] = torch.zeros(2)
    save_file(bad, str(path / "model.safetensors"))
    with pytest.raises(
        CheckpointError,
        match=r"2 checkpoint key\(s\) do not map.*mystery\.weight.*attn\.rope\.freqs",
    ):
        load_pretrained(path, device="cpu")
    short = {k: v for k, v in sd.items() if k != "projector.fc3.bias"}
    save_file(short, str(path / "model.safetensors"))
    with pytest.raises(
        CheckpointError, match=r"lacks 1 parameter\(s\): \['projector\.fc3\.bias'\]"
    ):
        load_pretrained(path, device="cpu")
    (path / "model.safetensors").unlink()
    torch.save(sd, path / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="pickled"):
        load_pretrained(path, device="cpu")


def test_unknown_spec_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="neither a folder nor a hub id"):
        load_pretrained(tmp_path / "nope" / "deeper")


def test_processor_appends_llama_prefix_token(tiny: tuple) -> None:
    model, proc = tiny
    cfg = model.config
    cfg2 = type(cfg).from_dict({**cfg.to_dict(), "action_prefix_token_id": 7})
    ids = OpenVLAProcessor(cfg2, proc.tokenizer).prompt_ids("reach the red cube")
    assert (
        ids[0] == proc.bos_id and ids[-1] == 7 and ids[:-1] == proc.prompt_ids("reach the red cube")
    )
