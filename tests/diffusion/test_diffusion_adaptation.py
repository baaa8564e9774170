"""Test-time adaptation: only z moves (weights bitwise unchanged), warm-started from the encoder
by default (the reference method); DP fine-tuning updates a copy only; CEM constraint search."""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest
import torch

from embodied.errors import ConfigError
from policies.diffusion.adaptation import (
    REFERENCE_SAMPLES,
    adapt_z_from_demonstration,
    default_batch_size,
    encode_demonstration,
    finetune_on_demonstration,
    search_z_cem,
)
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
    assert res.z.shape == (2,) and np.abs(res.z - res.z_init).max() > 1e-3  # z itself moved
    np.testing.assert_array_equal(trained.get_knob("z"), res.z)
    assert len(res.history) == 40 and np.all(np.isfinite(res.history))


def test_encoder_init_is_the_training_latent(
    trained: PDPPolicy, demonstrations: Demonstrations, tmp_path: Path
) -> None:
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
            trained,
            demonstrations.states[3],
            demonstrations.actions[3],
            z_init="random",  # type: ignore[arg-type]
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
        z_init="zero",
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


def test_adaptation_default_is_the_reference_encoder_warm_start(
    trained: PDPPolicy, demonstrations: Demonstrations
) -> None:
    """Defaults = reference ``ftl_igm``: encoder warm start, 300 Adam steps, lr 3e-3, clip 1."""
    params = inspect.signature(adapt_z_from_demonstration).parameters
    assert params["z_init"].default == "encoder"
    assert (params["steps"].default, params["lr"].default) == (300, 3e-3)
    assert params["grad_clip"].default == 1.0
    states, actions = demonstrations.states[5], demonstrations.actions[5]
    z_enc = encode_demonstration(trained, states, actions)
    res = adapt_z_from_demonstration(trained, states, actions, steps=1, lr=1e-6)
    np.testing.assert_allclose(res.z_init, z_enc)
    np.testing.assert_allclose(res.z, z_enc, atol=1e-4)
    ablation = adapt_z_from_demonstration(trained, states, actions, steps=1, z_init="zero")
    np.testing.assert_array_equal(ablation.z_init, np.zeros(2))
    with pytest.raises(ConfigError, match="z_init has shape"):
        adapt_z_from_demonstration(trained, states, actions, steps=1, z_init=np.zeros(3))


def test_reference_variant_adapts_on_the_whole_trajectory_with_k16(
    demonstrations: Demonstrations, tmp_path: Path
) -> None:
    """The reference variant: one window (first state, whole trajectory), K=16 draws a step."""
    cfg = tiny_config(variant="reference", n_obs_steps=1, horizon=20, n_action_steps=20, steps=5)
    train_pdp(demonstrations, tmp_path, cfg, progress=False, tensorboard=False)
    policy = PDPPolicy.from_pretrained(tmp_path)
    assert policy.config.variant == "reference"
    assert default_batch_size(policy) == REFERENCE_SAMPLES == 16
    res = adapt_z_from_demonstration(
        policy, demonstrations.states[0], demonstrations.actions[0], steps=3
    )
    assert len(res.history) == 3 and np.isfinite(res.z).all()


def test_finetuning_updates_only_the_copy(demonstrations: Demonstrations, tmp_path: Path) -> None:
    train_pdp(
        demonstrations, tmp_path, tiny_config(z_dim=0, steps=10), progress=False, tensorboard=False
    )
    dp = PDPPolicy.from_pretrained(tmp_path, noise_seed=3)
    before = {k: v.clone() for k, v in dp.model.state_dict().items()}
    tuned, history = finetune_on_demonstration(
        dp, demonstrations.states[2], demonstrations.actions[2], steps=30, lr=1e-3, seed=0
    )
    for k, v in dp.model.state_dict().items():
        assert torch.equal(before[k], v), f"the original's {k} changed"
    assert all(p.grad is None for p in dp.model.parameters())
    assert tuned is not dp and tuned.model is not dp.model and tuned.noise_seed == 3
    after = tuned.model.state_dict()
    moved = [
        k for k in before if k.startswith("denoiser.") and not torch.equal(before[k], after[k])
    ]
    assert moved, "fine-tuning moved no denoiser weight"
    for k in before:
        if k.startswith("normalizer."):
            assert torch.equal(before[k], after[k]), k
    assert len(history) == 30 and np.mean(history[-10:]) < np.mean(history[:10])
    with pytest.raises(ConfigError, match="steps=0"):
        finetune_on_demonstration(dp, demonstrations.states[2], demonstrations.actions[2], steps=0)


def test_finetuning_a_pdp_keeps_its_knob(
    trained: PDPPolicy, demonstrations: Demonstrations
) -> None:
    trained.set_knob("z", np.array([0.5, -1.0]))
    tuned, _ = finetune_on_demonstration(
        trained, demonstrations.states[0], demonstrations.actions[0], steps=2
    )
    np.testing.assert_array_equal(tuned.get_knob("z"), [0.5, -1.0])
