"""Tiny random-initialised OpenVLA models shared by the OpenVLA tests."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from policies.openvla.configuration_openvla import OpenVLAConfig
from policies.openvla.modeling_openvla import OpenVLAModel
from policies.openvla.processor_openvla import OpenVLAProcessor, build_tiny_tokenizer

STATS = {
    "toy_dataset": {
        "action": {
            "q01": [-0.2, -0.1, 0.0, -1.0, -2.0, -3.0, 0.0],
            "q99": [0.2, 0.3, 0.5, 1.0, 2.0, 3.0, 1.0],
            "mask": [True, True, True, True, True, True, False],
        }
    }
}


def tiny_config(**kw: Any) -> OpenVLAConfig:
    """The tiny preset with 7-dim toy statistics."""
    return OpenVLAConfig.tiny(norm_stats=kw.pop("norm_stats", STATS), **kw)


@pytest.fixture(scope="module")
def tiny() -> tuple[OpenVLAModel, OpenVLAProcessor]:
    """A random-init tiny model (non-trivial weights everywhere) and its processor."""
    torch.manual_seed(0)
    cfg = tiny_config()
    model = OpenVLAModel(cfg).eval()
    with torch.no_grad():  # make layer scales / registers non-trivial so the mapping is tested
        for name, p in model.named_parameters():
            if "lambda1" in name or "register_tokens" in name or "cls_token" in name:
                p.normal_(0.0, 0.5)
            if name.endswith("position_embeddings"):
                p[:, 1:].normal_(0.0, 0.5)
    return model, OpenVLAProcessor(cfg, build_tiny_tokenizer())
