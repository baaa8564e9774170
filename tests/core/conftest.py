"""Fixtures shared by the core loader tests (the hand-picked damage and the fuzzed)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``pristine(kind)``: the intact tiny folder of ``kind``, built on first use.

    Tests copy it before damaging it, so one build serves the whole session.
    """
    from tests.core.test_core_loaders import BUILDERS

    built: dict[str, Path] = {}

    def get(kind: str) -> Path:
        if kind not in built:
            built[kind] = BUILDERS[kind](tmp_path_factory.mktemp(kind) / kind)
        return built[kind]

    return get
