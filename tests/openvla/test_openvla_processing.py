"""OpenVLA action interface: prompt, action tokenizer (exhaustive), statistics, images."""

from __future__ import annotations

import numpy as np
import pytest

from embodied.errors import ConfigError
from policies.openvla.configuration_openvla import OpenVLAConfig
from policies.openvla.processor_openvla import (
    ActionTokenizer,
    ImageProcessor,
    action_stats,
    build_prompt,
    compute_norm_stats,
    normalize,
    unnormalize,
)
from tests.openvla.conftest import STATS, tiny_config


def test_prompt_is_openvlas() -> None:
    assert build_prompt("Pick up the cube") == (
        "In: What action should the robot take to pick up the cube?\nOut:"
    )
    with pytest.raises(ConfigError, match="empty instruction"):
        build_prompt("  ")


@pytest.mark.parametrize("vocab", [32000, 384])
def test_action_tokens_round_trip_exhaustively(vocab: int) -> None:
    tok = ActionTokenizer(vocab, 256)
    ids = np.arange(vocab - 256, vocab)
    # Every action id decodes to a bin center that encodes back to the same id, except the
    # lowest id (only produced by a == +1.0 exactly), which shares the last center.
    back = tok.encode(tok.decode(ids))
    assert np.array_equal(back[1:], ids[1:])
    assert back[0] == vocab - 255
    assert tok.decode(np.array([vocab - 256]))[0] == tok.decode(np.array([vocab - 255]))[0]
    # Dense action grid: ids stay in the last 256 of the vocabulary, decrease with the action,
    # and the reconstruction error is at most half a bin.
    a = np.linspace(-1.0, 1.0, 200_001)
    t = tok.encode(a)
    assert t.min() == vocab - 256 and t.max() == vocab - 1
    assert np.all(np.diff(t) <= 0)
    half_bin = (2.0 / 255) / 2
    assert np.abs(tok.decode(t) - a).max() <= half_bin + 1e-12
    # Out-of-range actions clip; stray (non-action) ids clip into the range when decoding.
    assert tok.encode(np.array([5.0, -5.0])).tolist() == [vocab - 256, vocab - 1]
    assert tok.decode(np.array([0, vocab + 10])).tolist() == [
        tok.bin_centers[-1],
        tok.bin_centers[0],
    ]
    assert tok.is_action_token(np.array([vocab - 257, vocab - 256, vocab - 1, vocab])).tolist() == [
        False,
        True,
        True,
        False,
    ]


def test_unnormalise_uses_q01_q99_and_leaves_masked_gripper() -> None:
    cfg = tiny_config()
    st = action_stats(cfg, None)
    a = np.array([-1.0, 1.0, 0.0, 0.5, -0.5, 1.0, 0.7])
    out = unnormalize(a, st)
    assert out[:6] == pytest.approx([-0.2, 0.3, 0.25, 0.5, -1.0, 3.0])
    assert out[6] == 0.7  # gripper (mask False) untouched
    assert normalize(out, st) == pytest.approx(a)


def test_unnorm_key_ambiguous_or_unknown_lists_keys() -> None:
    two = {**STATS, "other": STATS["toy_dataset"]}
    cfg = tiny_config(norm_stats=two)
    with pytest.raises(ConfigError, match=r"ambiguous.*\['other', 'toy_dataset'\]"):
        cfg.resolve_unnorm_key(None)
    with pytest.raises(
        ConfigError, match=r"unknown unnorm_key 'bridge'.*\['other', 'toy_dataset'\]"
    ):
        cfg.resolve_unnorm_key("bridge")
    assert cfg.action_dim("other") == 7
    with pytest.raises(ConfigError, match="no action statistics"):
        tiny_config(norm_stats={}).resolve_unnorm_key(None)


def test_norm_stats_shape_checked() -> None:
    with pytest.raises(ConfigError, match="lengths differ"):
        tiny_config(norm_stats={"d": {"action": {"q01": [0, 0], "q99": [1]}}})
    st = compute_norm_stats(np.random.default_rng(0).normal(size=(500, 4)), [True] * 3 + [False])
    assert len(st["action"]["q01"]) == 4 and st["action"]["mask"][-1] is False


def test_minmax_bounds_keep_the_largest_actions_that_q99_clips() -> None:
    """OpenVLA's BOUNDS (min/max) round-trip the fastest actions; BOUNDS_Q99 clips them."""
    a = np.random.default_rng(0).normal(size=(500, 3))
    a[0] = [4.0, -4.0, 4.0]  # one rare, largest action
    for bounds, kept in (("minmax", True), ("q99", False)):
        st = compute_norm_stats(a, bounds=bounds)
        assert st["action"]["bounds"] == bounds
        stats = {k: np.asarray(st["action"][k]) for k in ("q01", "q99", "mask")}
        back = unnormalize(normalize(a[:1], stats), stats)
        assert np.allclose(back, a[:1]) is kept
    assert compute_norm_stats(a, bounds="minmax")["action"]["q99"][0] == 4.0
    with pytest.raises(ConfigError, match="action bounds 'q95'"):
        compute_norm_stats(a, bounds="q95")


def test_config_validates_and_derives() -> None:
    cfg = tiny_config()
    assert cfg.num_patches == 64 and cfg.vision_dim == 96 and cfg.text_vocab_size == 384
    with pytest.raises(ConfigError, match="not a multiple of the dino patch size"):
        tiny_config(image_size=60)
    with pytest.raises(ConfigError, match="second-to-last"):
        tiny_config(dino={"num_hidden_layers": 1})
    released = OpenVLAConfig.openvla_7b()
    assert released.num_patches == 256 and released.vision_dim == 2176
    assert released.text_vocab_size == 32000 and released.action_prefix_token_id == 29871
    back = OpenVLAConfig.from_dict(cfg.to_dict())
    assert back == cfg


def test_image_processor_crop_resize_normalise() -> None:
    cfg = tiny_config()
    proc = ImageProcessor(cfg)
    img = np.full((100, 120, 3), 255, dtype=np.uint8)
    pv = proc([img, img])
    assert tuple(pv.shape) == (2, 6, 64, 64)
    # white pixel: DINOv2 channels (1 - mean) / std, SigLIP channels (1 - 0.5) / 0.5 = 1
    assert pv[0, 0, 0, 0].item() == pytest.approx((1 - 0.485) / 0.229, rel=1e-5)
    assert pv[0, 3:].min().item() == pytest.approx(1.0)
    grad = np.tile(np.linspace(0, 255, 128, dtype=np.uint8)[None, :, None], (128, 1, 3))
    plain = proc.prepare(grad)
    cfg.center_crop = True
    cropped = ImageProcessor(cfg).prepare(grad)
    assert cropped.shape == plain.shape == (64, 64, 3)
    # the 0.9-area crop removes ~2.6 % of the width per side: the left edge gets brighter
    assert cropped[:, 0].mean() > plain[:, 0].mean() + 3
    with pytest.raises(ConfigError, match="uint8"):
        proc.prepare(np.zeros((8, 8), dtype=np.float32))
