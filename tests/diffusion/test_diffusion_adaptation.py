"""Test-time adaptation: only z moves (weights bitwise unchanged); CEM constraint search."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from embodied.errors import ConfigError
from policies.diffusion.adaptation import adapt_z_from_demonstration, search_z_cem
from policies.diffusion.policy_pdp import PDPPolicy
from policies.diffusion.processor_pdp import Demonstrations
from policies.diffusion.training_pdp import train_pdp
from tests.diffusion.conftest import tiny_config


@pytest.fixture
def trained(demonstrations: Demonstrations, tmp_path: Path) -> PDPPolicy:
    train_pdp(demonstrations, tmp_path, tiny_config(steps=30), progress=False, tensorboard=False)
    return PDPPolicy.from_pretrained(tmp_path)


def test_one_demonstration_adaptation_changes_only_z(
    trained: PDPPolicy, demonstrations: Demonstrations
) -> None:
    before = {k: v.clone() for k, v in trained.model.state_dict().items()}
    flags = {n: p.requires_grad for n, p in trained.model.named_parameters()}
    res = adapt_z_from_demonstration(
        trained, demonstrations.states[1], demonstrations.actions[1], steps=40, seed=0
    )
    after = trained.model.state_dict()
    assert before.keys() == after.keys()
    for k in before:
        assert torch.equal(before[k], after[k]), f"weight {k} changed"
    assert all(p.grad is None for p in trained.model.parameters())
    assert {n: p.requires_grad for n, p in trained.model.named_parameters()} == flags
    assert res.z.shape == (2,) and np.abs(res.z).max() > 1e-3  # z itself moved
    np.testing.assert_array_equal(trained.get_knob("z"), res.z)
    assert len(res.history) == 40 and np.all(np.isfinite(res.history))


def test_encoder_init_is_the_training_latent(
    trained: PDPPolicy, demonstrations: Demonstrations, tmp_path: Path
) -> None:
    from policies.diffusion.adaptation import encode_demonstration
    from policies.diffusion.training_pdp import load_train_latents

    latents, _ = load_train_latents(tmp_path)
    z = encode_demonstration(trained, demonstrations.states[3], demonstrations.actions[3])
    np.testing.assert_allclose(z, latents[3], rtol=1e-4, atol=1e-4)
    res = adapt_z_from_demonstration(
        trained, demonstrations.states[3], demonstrations.actions[3], steps=2, z_init="encoder"
    )
    assert np.linalg.norm(res.z - z) < 0.1  # started at the encoder's guess
    with pytest.raises(ConfigError, match="z_init"):
        adapt_z_from_demonstration(
            trained, demonstrations.states[3], demonstrations.actions[3], z_init="random"
        )


def test_adaptation_lowers_the_demonstration_loss(
    trained: PDPPolicy, demonstrations: Demonstrations
) -> None:
    res = adapt_z_from_demonstration(
        trained,
        demonstrations.states[0],
        demonstrations.actions[0],
        steps=120,
        lr=3e-2,
        batch_size=128,
        seed=1,
    )
    assert np.mean(res.history[-20:]) < np.mean(res.history[:20])


def test_adaptation_refuses_plain_policy_and_bad_demonstration(
    demonstrations: Demonstrations, tmp_path: Path
) -> None:
    train_pdp(
        demonstrations, tmp_path, tiny_config(z_dim=0, steps=2), progress=False, tensorboard=False
    )
    dp = PDPPolicy.from_pretrained(tmp_path)
    with pytest.raises(ConfigError, match="z_dim=0"):
        adapt_z_from_demonstration(dp, demonstrations.states[0], demonstrations.actions[0])


def test_cem_finds_the_constraint_optimum() -> None:
    target = np.array([1.5, -0.5])
    calls = []

    def cost(z: np.ndarray) -> np.ndarray:
        calls.append(len(z))
        return ((z - target) ** 2).sum(1)

    res = search_z_cem(cost, 2, iterations=8, population=24, elites=6, seed=0)
    assert np.linalg.norm(res.z - target) < 0.2
    assert res.evaluations == sum(calls) == 8 * 24
    assert res.history[-1] <= res.history[0]


def test_cem_validates_settings() -> None:
    with pytest.raises(ConfigError, match="elites"):
        search_z_cem(lambda z: np.zeros(len(z)), 2, population=4, elites=5)
    with pytest.raises(ConfigError, match="shape"):
        search_z_cem(lambda z: np.zeros(3), 2, population=4, elites=2)
