"""Denoisers, FiLM(z), DDIM sampling against diffusers, soft-DTW and the manifold loss."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from diffusers import DDIMScheduler

from embodied.errors import CheckpointError
from policies.diffusion.modeling_denoiser import ZFiLM
from policies.diffusion.modeling_manifold import (
    TrajectoryVAE,
    geometric_loss,
    soft_dtw,
    soft_dtw_divergence_matrix,
)
from policies.diffusion.modeling_pdp import PDPModel
from tests.diffusion.conftest import tiny_config


def _perturb_films(model: PDPModel, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    for m in model.denoiser.modules():
        if isinstance(m, ZFiLM) and m.proj is not None:
            with torch.no_grad():
                m.proj.weight.copy_(torch.randn(m.proj.weight.shape, generator=g) * 0.3)


@pytest.mark.parametrize("denoiser", ["mlp", "unet"])
def test_film_zero_init_then_z_matters(denoiser: str) -> None:
    torch.manual_seed(0)
    model = PDPModel(tiny_config(denoiser=denoiser))
    films = [m for m in model.denoiser.modules() if isinstance(m, ZFiLM)]
    n_layers = {"mlp": 2 + 2, "unet": 2 + 1 + 1}[denoiser]  # every layer has a z-FiLM
    assert len(films) == n_layers
    for f in films:
        assert f.proj is not None
        assert torch.count_nonzero(f.proj.weight) == 0 and torch.count_nonzero(f.proj.bias) == 0
    x, t, obs = torch.randn(3, 8, 2), torch.tensor([1, 50, 99]), torch.randn(3, 8)
    z1, z2 = torch.zeros(3, 2), torch.full((3, 2), 2.0)
    with torch.no_grad():
        assert torch.equal(model.denoiser(x, t, obs, z1), model.denoiser(x, t, obs, z2))
        _perturb_films(model)
        assert not torch.allclose(model.denoiser(x, t, obs, z1), model.denoiser(x, t, obs, z2))


def test_plain_policy_has_no_z_parameters() -> None:
    model = PDPModel(tiny_config(z_dim=0))
    assert model.manifold is None
    assert all(f.proj is None for f in model.denoiser.modules() if isinstance(f, ZFiLM))


@pytest.mark.parametrize("denoiser", ["mlp", "unet"])
def test_ddim_sampling_matches_diffusers_step(denoiser: str) -> None:
    """The precomputed-coefficient loop equals diffusers' DDIMScheduler.step, step by step."""
    torch.manual_seed(1)
    cfg = tiny_config(denoiser=denoiser, num_inference_steps=8, num_train_timesteps=100)
    model = PDPModel(cfg).eval()
    _perturb_films(model)
    obs, z = torch.randn(2, 8), torch.randn(2, 2)
    noise = torch.randn(2, 8, 2)
    ours = model.sample(obs, z, noise=noise)
    sched = DDIMScheduler(
        num_train_timesteps=100,
        beta_schedule="squaredcos_cap_v2",
        clip_sample=True,
        set_alpha_to_one=True,
        prediction_type="epsilon",
    )
    sched.set_timesteps(8)
    x = noise.clone()
    with torch.no_grad():
        for t in sched.timesteps:
            eps = model.denoiser(x, t.expand(2), obs, z)
            x = sched.step(eps, t, x, eta=0.0).prev_sample
    assert list(model.ddim_timesteps) == list(sched.timesteps)
    torch.testing.assert_close(ours, x, rtol=1e-4, atol=1e-5)
    assert ours.abs().max() <= 1.0 + 1e-6  # clip_sample keeps normalised actions in range


def test_training_loss_uses_cosine_ddpm() -> None:
    model = PDPModel(tiny_config())
    betas = model.train_scheduler.betas
    assert model.train_scheduler.config.beta_schedule == "squaredcos_cap_v2"
    assert betas[0] < betas[-1]
    loss = model.compute_loss(torch.randn(4, 8), torch.rand(4, 8, 2) * 2 - 1, torch.randn(4, 2))
    assert loss.ndim == 0 and torch.isfinite(loss)


def test_normalizer_refuses_unset_stats() -> None:
    model = PDPModel(tiny_config())
    with pytest.raises(CheckpointError, match="state_min"):
        model.normalizer.check()


def test_soft_dtw_approaches_dtw() -> None:
    a = torch.tensor([[[0.0], [1.0], [2.0]]])
    b = torch.tensor([[[0.0], [0.0], [1.0], [2.0]]])  # time-warped copy: DTW = 0
    c = torch.tensor([[[1.0], [2.0], [3.0]]])  # shifted: DTW = 1 (0->1 only) ... >= 1
    assert soft_dtw(a, b, gamma=1e-3).item() == pytest.approx(0.0, abs=1e-2)
    assert soft_dtw(a, c, gamma=1e-3).item() >= 1.0 - 1e-2


def test_divergence_matrix_properties() -> None:
    rng = np.random.default_rng(0)
    base = np.linspace(0, 1, 10)[:, None] * np.array([[0.0, 1.0]])
    left, right = base + np.array([-0.5, 0.0]), base + np.array([0.5, 0.0])
    paths = np.stack([left, left + rng.normal(0, 0.01, left.shape), right])
    d = soft_dtw_divergence_matrix(paths, gamma=0.01)
    assert np.allclose(d, d.T) and np.allclose(np.diag(d), 0.0)
    assert d[0, 1] < 0.1 * d[0, 2]  # same route close, different route far


def test_geometric_loss_zero_when_distances_match() -> None:
    z = torch.tensor([[0.0, 0.0], [1.0, 0.0], [3.0, 0.0]])
    dist = torch.cdist(z, z)
    assert geometric_loss(z, dist).item() == pytest.approx(0.0, abs=1e-6)
    assert geometric_loss(z, dist.flip(0).flip(1) + torch.eye(3)).item() > 0.01


def test_vae_loss_parts_and_gradients() -> None:
    cfg = tiny_config().manifold
    vae = TrajectoryVAE(cfg, 4, 2)
    s, a = torch.randn(5, cfg.seq_len, 4), torch.randn(5, cfg.seq_len, 2)
    loss, parts = vae.loss(s, a, torch.rand(5, 5), torch.Generator().manual_seed(0))
    assert set(parts) == {"loss", "action", "state", "kl", "geo"}
    loss.backward()
    assert vae.to_latent.weight.grad is not None
    mu, logvar = vae.encode(s, a)
    assert mu.shape == logvar.shape == (5, 2)
