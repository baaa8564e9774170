"""Shared test setup: headless GL, one torch thread, paths to shared data and artifacts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
ARTIFACTS = ROOT / "test-artifacts"


def pytest_configure(config: pytest.Config) -> None:
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The read-only ``../shared`` folder beside the checkout (LIBERO assets, ...)."""
    if not SHARED.is_dir():
        pytest.fail(f"{SHARED} is missing: tests need the shared data folder beside the checkout")
    return SHARED


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    """Folder for test artifacts worth keeping (screenshots, plots, videos)."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
