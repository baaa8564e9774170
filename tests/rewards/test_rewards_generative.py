"""Generative VLM judge on a tiny random LLaVA loaded through the real loading code."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from embodied.errors import CheckpointError, ConfigError
from embodied.rewards import load_judge
from embodied.rewards.generative import GenerativeJudge, GenerativeJudgeConfig


@pytest.fixture(scope="module")
def judge(tiny_llava: Path) -> GenerativeJudge:
    j = load_judge(str(tiny_llava), device="cpu")
    assert isinstance(j, GenerativeJudge)
    return j


def _clips(rng: np.random.Generator, n: int, t: int = 7) -> list[np.ndarray]:
    return [rng.integers(0, 256, (t, 40, 56, 3), dtype=np.uint8) for _ in range(n)]


def test_score_is_p1_over_p1_plus_p0_of_next_token(
    judge: GenerativeJudge, rng: np.random.Generator
) -> None:
    clip = _clips(rng, 1, t=5)[0]
    text = "reach the red cube"
    # independent computation: one unpadded prompt, full logits, last position
    from PIL import Image

    inputs = judge.processor(
        text=[judge.prompt_text(text)],
        images=[[Image.fromarray(f) for f in clip]],
        return_tensors="pt",
    )
    with torch.no_grad():
        logits = judge.model(**inputs).logits[0, -1]
    tok = judge.processor.tokenizer
    p = torch.softmax(logits.double(), -1)
    one, zero = tok.convert_tokens_to_ids("1"), tok.convert_tokens_to_ids("0")
    expected = float(p[one] / (p[one] + p[zero]))
    assert judge.score(clip, text) == pytest.approx(expected, abs=1e-5)
    assert judge.prompt_text(text).count("<image>") == 5
    assert "Instruction: reach the red cube" in judge.prompt_text(text)


def test_batched_equals_single_with_left_padding(
    judge: GenerativeJudge, rng: np.random.Generator
) -> None:
    clips = _clips(rng, 3)
    texts = ["reach the red cube", "go to the blue block now please", "touch it"]
    batched = judge.score_batch(clips, texts, batch_size=3)
    single = np.array([judge.score(c, t) for c, t in zip(clips, texts, strict=False)])
    np.testing.assert_allclose(batched, single, atol=1e-5)
    assert ((batched > 0) & (batched < 1)).all()
    assert len(set(np.round(batched, 6))) == 3  # different prompts, different scores


def test_bad_inputs_get_clear_errors(
    judge: GenerativeJudge, tiny_llava: Path, rng: np.random.Generator
) -> None:
    with pytest.raises(ConfigError, match="empty"):
        judge.score([], "reach the red cube")
    with pytest.raises(ConfigError, match="dtype float64"):
        judge.score(np.zeros((5, 32, 32, 3)), "reach the red cube")
    with pytest.raises(ConfigError, match="2 instructions for 3 clips"):
        judge.score_batch(_clips(rng, 3), ["a", "b"])
    with pytest.raises(ConfigError, match="instruction"):
        judge.score(_clips(rng, 1)[0], "")
    with pytest.raises(ConfigError, match=r"\{instruction\}"):
        GenerativeJudgeConfig(model=str(tiny_llava), prompt="Did it work?")
    with pytest.raises(ConfigError, match="single token"):
        GenerativeJudge(
            GenerativeJudgeConfig(model=str(tiny_llava), device="cpu", yes_token="yes yes")
        )
    with pytest.raises(CheckpointError, match="cannot load"):
        GenerativeJudge(GenerativeJudgeConfig(model=str(tiny_llava / "missing"), device="cpu"))
