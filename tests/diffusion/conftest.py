"""Fixtures of the PDP tests: tiny configs, synthetic multimodal demonstrations, real env
demonstrations."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from policies.diffusion.configuration_pdp import ManifoldConfig, PDPConfig
from policies.diffusion.processor_pdp import Demonstrations


def tiny_config(**kw: object) -> PDPConfig:
    """A PDP small enough to train for a few steps in a test."""
    base = dict(
        state_dim=4,
        action_dim=2,
        n_obs_steps=2,
        horizon=8,
        n_action_steps=4,
        z_dim=2,
        hidden_dim=32,
        n_blocks=2,
        cond_dim=16,
        time_embed_dim=16,
        batch_size=32,
        steps=20,
        warmup_steps=2,
        unet_channels=(16, 32),
        manifold=ManifoldConfig(
            seq_len=8,
            d_model=16,
            n_heads=2,
            n_layers=1,
            decoder_hidden=32,
            steps=10,
            batch_size=8,
            path_points=8,
        ),
    )
    base.update(kw)
    return PDPConfig(**base)  # type: ignore[arg-type]


def synthetic_demonstrations(n: int = 12, seed: int = 0, length: int = 20) -> Demonstrations:
    """Two route classes (left/right of an obstacle at the origin) with velocity actions."""
    rng = np.random.default_rng(seed)
    states, actions, labels = [], [], []
    for i in range(n):
        side = -1.0 if i % 2 == 0 else 1.0
        t = np.linspace(0.0, 1.0, length + 1)
        x = side * 0.8 * np.sin(np.pi * t) + rng.normal(0, 0.02)
        y = -1.0 + 2.0 * t
        path = np.stack([x, y], 1)
        vel = np.diff(path, axis=0) * 10.0
        states.append(np.concatenate([path[:-1], vel], 1))
        actions.append(vel)
        labels.append("left" if side < 0 else "right")
    return Demonstrations(states, actions, labels)


@pytest.fixture
def demonstrations() -> Demonstrations:
    return synthetic_demonstrations()


@pytest.fixture(scope="session")
def reach_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A few real expert demonstrations of mujoco:reach_around written by the DatasetWriter."""
    from embodied.apps.route_task import collect_demonstrations

    root = tmp_path_factory.mktemp("reach_demos")
    collect_demonstrations(8, seed=0, out_dir=root)
    return root
