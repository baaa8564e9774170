"""Contrastive judge on tiny random CLIP / SigLIP models saved and loaded from disk."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from embodied.errors import ConfigError
from embodied.rewards import load_judge
from embodied.rewards.contrastive import ContrastiveJudge, ContrastiveJudgeConfig
from embodied.rewards.tiny import build_tiny_clip


def _clips(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    return [rng.integers(0, 256, (5, 32, 32, 3), dtype=np.uint8) for _ in range(n)]


def test_cosine_matches_model_features(tiny_clip: Path, rng: np.random.Generator) -> None:
    judge = load_judge(str(tiny_clip), device="cpu")
    assert isinstance(judge, ContrastiveJudge)
    clip = _clips(rng, 1)[0]
    text = "reach the red cube"
    proc = judge.processor
    with torch.no_grad():
        img = judge.model.get_image_features(
            pixel_values=proc.image_processor(images=[clip[-1]], return_tensors="pt")[
                "pixel_values"
            ]
        )
        tok = proc.tokenizer(
            [text], padding="max_length", max_length=judge._max_text_len(), return_tensors="pt"
        )
        txt = judge.model.get_text_features(**tok)
    img = getattr(img, "pooler_output", img)
    txt = getattr(txt, "pooler_output", txt)
    cos = torch.nn.functional.cosine_similarity(img, txt).item()
    assert judge.cosine([clip], [text])[0] == pytest.approx(cos, abs=1e-5)
    cfg = judge.config
    assert judge.score(clip, text) == pytest.approx(
        1 / (1 + np.exp(-cfg.scale * (cos - cfg.offset)))
    )


def test_calibration_separates_labels(tmp_path: Path, rng: np.random.Generator) -> None:
    folder = build_tiny_clip(tmp_path / "siglip", "siglip")
    judge = ContrastiveJudge(ContrastiveJudgeConfig(model=str(folder), device="cpu"))
    clips = _clips(rng, 40)
    text = "the gripper is touching the red cube"
    cos = judge.cosine(clips, [text] * 40)
    labels = cos > np.median(cos)  # ground truth that the similarity can explain
    fitted = judge.calibrate(clips, labels, text)
    assert fitted["scale"] > 0
    assert (judge.predict(clips, text) == labels).mean() >= 0.95
    with pytest.raises(ConfigError, match="anti-correlated"):
        judge.calibrate(clips, ~labels, text)


def test_config_validation(tiny_clip: Path) -> None:
    with pytest.raises(ConfigError, match="frames='all'"):
        ContrastiveJudgeConfig(model=str(tiny_clip), frames="all")
    with pytest.raises(ConfigError, match="threshold"):
        ContrastiveJudgeConfig(model=str(tiny_clip), threshold=1.5)
