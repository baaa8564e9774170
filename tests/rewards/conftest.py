"""Fixtures of the reward tests: tiny real models built offline, recorded MuJoCo
demonstrations."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(scope="session")
def tiny_llava(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random LLaVA (CLIP vision + Llama) with processor, saved to disk."""
    from embodied.rewards.tiny import build_tiny_llava

    return build_tiny_llava(tmp_path_factory.mktemp("llava"))


@pytest.fixture(scope="session")
def tiny_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random CLIPModel with processor, saved to disk."""
    from embodied.rewards.tiny import build_tiny_clip

    return build_tiny_clip(tmp_path_factory.mktemp("clip"), "clip")


@pytest.fixture(scope="session")
def arm_demonstrations() -> list:
    """Labelled arm_reach episodes: 3 experts, 1 near miss, 1 expert (held out)."""
    from embodied.apps.training.data_minijudge import record_episodes

    return record_episodes(
        "mujoco:arm_reach", 5, 40000, kinds=("expert", "expert", "expert", "near", "expert")
    )


@pytest.fixture(scope="session")
def minijudge():
    """The shipped judge."""
    from embodied.rewards import load_judge

    return load_judge("minijudge", device="cpu")


@pytest.fixture()
def rng() -> np.random.Generator:
    return np.random.default_rng(0)
