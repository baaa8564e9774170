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


TEXT = "the gripper is touching the red cube"


def _frames(seed: int, dark: np.ndarray, noise: float) -> list[np.ndarray]:
    """Clips of noisy dark (mean 20) or bright (mean 230) frames.

    The kind of each clip is its ground truth: it comes from the pixels, not from the judge's
    own similarity, so calibration is tested against labels it could get wrong.
    """
    rng = np.random.default_rng(seed)
    return [
        np.clip((20.0 if d else 230.0) + rng.normal(0.0, noise, (5, 32, 32, 3)), 0, 255).astype(
            np.uint8
        )
        for d in dark
    ]


@pytest.fixture(scope="module")
def siglip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_clip(tmp_path_factory.mktemp("siglip"), "siglip")


@pytest.fixture(scope="module")
def fit_set(siglip: Path) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, bool]:
    """48 fit clips, their cosines, labels from their content, and which kind is success."""
    judge = ContrastiveJudge(ContrastiveJudgeConfig(model=str(siglip), device="cpu"))
    dark = np.arange(48) % 2 == 0
    clips = _frames(1, dark, noise=30.0)
    cos = judge.cosine(clips, [TEXT] * len(clips))
    # which kind the random model associates with the text is a property of its weights (one
    # bit for the whole set); each clip's label then comes from its pixels
    success_is_dark = bool(cos[dark].mean() > cos[~dark].mean())
    labels = dark == success_is_dark
    assert cos[labels].min() > cos[~labels].max() + 0.05  # precondition: the kinds separate
    return clips, cos, labels, success_is_dark


def test_calibration_generalises_to_clips_it_was_not_fit_on(
    siglip: Path, fit_set: tuple[list[np.ndarray], np.ndarray, np.ndarray, bool]
) -> None:
    clips, cos, labels, success_is_dark = fit_set
    judge = ContrastiveJudge(ContrastiveJudgeConfig(model=str(siglip), device="cpu"))
    fitted = judge.calibrate(clips, labels, TEXT)
    assert fitted["scale"] > 0 and judge.threshold == fitted["threshold"]
    # the decision boundary, mapped back to cosine similarity, lies between the two kinds
    t = fitted["threshold"]
    boundary = fitted["offset"] + np.log(t / (1 - t)) / fitted["scale"]
    assert cos[~labels].max() < boundary <= cos[labels].min() + 1e-9
    # new clips from another source (other noise seed and level), never seen by calibrate
    held_dark = np.arange(40) % 2 == 1
    held = _frames(2, held_dark, noise=15.0)
    truth = held_dark == success_is_dark
    decisions = judge.predict(held, TEXT)
    tpr, tnr = decisions[truth].mean(), (~decisions[~truth]).mean()
    assert tpr >= 0.9 and tnr >= 0.9, (tpr, tnr)
    with pytest.raises(ConfigError, match="anti-correlated"):
        judge.calibrate(clips, ~labels, TEXT)


def test_calibrated_probabilities_are_the_likelihood_optimum(
    siglip: Path, fit_set: tuple[list[np.ndarray], np.ndarray, np.ndarray, bool]
) -> None:
    """Platt scaling on overlapping labels: the fitted (scale, offset) maximise the logistic
    likelihood, and the probabilities reproduce the label rate."""
    clips, cos, labels, _ = fit_set
    noisy = labels.copy()
    noisy[[0, 6, 12, 1, 7, 13]] ^= True  # three mislabelled clips per kind: a finite optimum
    judge = ContrastiveJudge(ContrastiveJudgeConfig(model=str(siglip), device="cpu"))
    fitted = judge.calibrate(clips, noisy, TEXT)
    probs = judge.score_batch(clips, TEXT)
    y = noisy.astype(np.float64)

    def log_loss(scale: float, offset: float) -> float:
        z = scale * (cos - offset)
        return float(np.mean(np.logaddexp(0.0, z) - y * z))

    best = log_loss(fitted["scale"], fitted["offset"])
    assert probs == pytest.approx(1 / (1 + np.exp(-fitted["scale"] * (cos - fitted["offset"]))))
    for ds, do in ((1.1, 0.0), (0.9, 0.0), (1.0, 0.005), (1.0, -0.005)):
        assert best < log_loss(fitted["scale"] * ds, fitted["offset"] + do)
    assert probs.mean() == pytest.approx(y.mean(), abs=1e-3)


def test_config_validation(tiny_clip: Path) -> None:
    with pytest.raises(ConfigError, match="frames='all'"):
        ContrastiveJudgeConfig(model=str(tiny_clip), frames="all")
    with pytest.raises(ConfigError, match="threshold"):
        ContrastiveJudgeConfig(model=str(tiny_clip), threshold=1.5)
