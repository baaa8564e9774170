"""The behaviour manifold: a trajectory VAE with a geometry-preserving latent space.

Encoder: a small transformer over interleaved state/action tokens of a whole demonstration
(states relative to the demonstration's start), whose last (summary) token gives
``(mu, log sigma^2)``.
Decoder: an MLP on ``[z, t]`` reconstructing state and action at normalised time ``t``.
Loss = MSE(actions) + MSE(states) + kl_weight * KL + geo_weight * L_geo, where L_geo asks
latent distances to follow soft-DTW distances between the demonstrations' end-effector paths
(each divided by its batch maximum).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from policies.diffusion.configuration_pdp import ManifoldConfig


def resample(seq: np.ndarray, n: int) -> np.ndarray:
    """Linearly resample ``seq`` (T, D) to (n, D) over normalised time."""
    seq = np.asarray(seq, dtype=np.float64)
    if seq.shape[0] == 1:
        return np.repeat(seq, n, axis=0)
    src = np.linspace(0.0, 1.0, seq.shape[0])
    dst = np.linspace(0.0, 1.0, n)
    return np.stack([np.interp(dst, src, seq[:, d]) for d in range(seq.shape[1])], axis=1)


def soft_dtw(x: torch.Tensor, y: torch.Tensor, gamma: float) -> torch.Tensor:
    """Soft-DTW (Cuturi & Blondel 2017) between batches of sequences.

    Args:
        x: (B, N, D) sequences.
        y: (B, M, D) sequences.
        gamma: Smoothing (> 0); gamma -> 0 recovers DTW.

    Returns:
        (B,) soft-DTW values with squared-Euclidean ground cost.
    """
    cost = torch.cdist(x, y).pow(2)  # (B, N, M)
    b, n, m = cost.shape
    inf = torch.full((b,), float("inf"), dtype=cost.dtype, device=cost.device)
    prev = [torch.zeros(b, dtype=cost.dtype)] + [inf] * m  # row -1: R[-1,-1] = 0
    for i in range(n):
        row = [inf]
        for j in range(m):
            stack = torch.stack((prev[j], prev[j + 1], row[j]), dim=0)
            softmin = -gamma * torch.logsumexp(-stack / gamma, dim=0)
            row.append(cost[:, i, j] + softmin)
        prev = row
    return prev[m]


def soft_dtw_divergence_matrix(paths: np.ndarray, gamma: float) -> np.ndarray:
    """Pairwise normalised soft-DTW divergences between paths.

    ``D(a, b) = sdtw(a, b) - (sdtw(a, a) + sdtw(b, b)) / 2`` (zero on identical paths,
    non-negative), divided by the path length.

    Args:
        paths: (N, L, D) paths resampled to a common length.
        gamma: Soft-DTW smoothing.

    Returns:
        (N, N) symmetric matrix.
    """
    p = torch.as_tensor(paths, dtype=torch.float64)
    n = p.shape[0]
    ii, jj = np.triu_indices(n, k=1)
    self_d = soft_dtw(p, p, gamma)
    out = np.zeros((n, n))
    chunk = 2048
    for s in range(0, len(ii), chunk):
        a, b = ii[s : s + chunk], jj[s : s + chunk]
        d = soft_dtw(p[a], p[b], gamma) - 0.5 * (self_d[a] + self_d[b])
        out[a, b] = out[b, a] = d.clamp_min(0.0).numpy()
    return out / p.shape[1]


class TrajectoryVAE(nn.Module):
    """Transformer encoder over a whole demonstration, MLP decoder on ``[z, t]``.

    Args:
        config: Manifold configuration.
        state_dim: State size.
        action_dim: Action size.
    """

    def __init__(self, config: ManifoldConfig, state_dim: int, action_dim: int) -> None:
        super().__init__()
        self.config = config
        self.state_dim = state_dim
        self.action_dim = action_dim
        d = config.d_model
        self.state_in = nn.Linear(state_dim, d)
        self.action_in = nn.Linear(action_dim, d)
        self.pos = nn.Parameter(torch.randn(1, config.n_tokens, d) * 0.02)
        self.summary = nn.Parameter(torch.zeros(1, 1, d))
        layer = nn.TransformerEncoderLayer(
            d,
            config.n_heads,
            dim_feedforward=2 * d,
            dropout=0.0,
            batch_first=True,
            norm_first=True,
        )
        self.encoder = nn.TransformerEncoder(layer, config.n_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.to_latent = nn.Linear(d, 2 * config.z_dim)
        h = config.decoder_hidden
        self.decoder = nn.Sequential(
            nn.Linear(config.z_dim + 1, h),
            nn.Mish(),
            nn.Linear(h, h),
            nn.Mish(),
            nn.Linear(h, h),
            nn.Mish(),
            nn.Linear(h, state_dim + action_dim),
        )

    def encode(
        self, states: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(mu, logvar) of demonstrations.

        Args:
            states: (B, L, state_dim) normalised states relative to the demonstration start.
            actions: (B, L, action_dim) normalised actions.
        """
        b, length, _ = states.shape
        tokens = torch.stack((self.state_in(states), self.action_in(actions)), dim=2)
        tokens = tokens.reshape(b, 2 * length, -1)
        tokens = torch.cat((tokens, self.summary.expand(b, -1, -1)), dim=1) + self.pos
        out = self.norm(self.encoder(tokens))[:, -1]
        mu, logvar = self.to_latent(out).chunk(2, dim=-1)
        return mu, logvar.clamp(-10.0, 10.0)

    def decode(self, z: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Reconstruct (states, actions) of shape (B, length, .) from z (B, z_dim)."""
        b = z.shape[0]
        t = torch.linspace(0.0, 1.0, length, dtype=z.dtype, device=z.device)
        inp = torch.cat(
            (z[:, None, :].expand(b, length, -1), t[None, :, None].expand(b, -1, 1)), -1
        )
        out = self.decoder(inp)
        return out[..., : self.state_dim], out[..., self.state_dim :]

    def loss(
        self,
        states: torch.Tensor,
        actions: torch.Tensor,
        path_dist: torch.Tensor,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The manifold loss on a batch of demonstrations.

        Args:
            states: (B, L, state_dim) normalised relative states.
            actions: (B, L, action_dim) normalised actions.
            path_dist: (B, B) normalised soft-DTW divergences between the demonstrations' paths.
            generator: Noise generator for the reparameterisation.

        Returns:
            Total loss and its parts as floats.
        """
        cfg = self.config
        mu, logvar = self.encode(states, actions)
        eps = torch.randn(mu.shape, generator=generator, dtype=mu.dtype)
        z = mu + torch.exp(0.5 * logvar) * eps
        rec_s, rec_a = self.decode(z, states.shape[1])
        l_state = torch.mean((rec_s - states) ** 2)
        l_action = torch.mean((rec_a - actions) ** 2)
        kl = torch.mean(-0.5 * torch.sum(1 + logvar - mu**2 - logvar.exp(), dim=-1))
        l_geo = geometric_loss(mu, path_dist)
        total = l_action + l_state + cfg.kl_weight * kl + cfg.geo_weight * l_geo
        parts = {
            "loss": total.item(),
            "action": l_action.item(),
            "state": l_state.item(),
            "kl": kl.item(),
            "geo": l_geo.item(),
        }
        return total, parts


def geometric_loss(z: torch.Tensor, path_dist: torch.Tensor) -> torch.Tensor:
    """L_geo: MSE between batch-max-normalised latent and path distances over all pairs."""
    b = z.shape[0]
    iu = torch.triu_indices(b, b, offset=1)
    dz = torch.sqrt(((z[:, None, :] - z[None, :, :]) ** 2).sum(-1) + 1e-9)[iu[0], iu[1]]
    dtau = path_dist[iu[0], iu[1]]
    dz = dz / dz.max().clamp_min(1e-6)
    dtau = dtau / dtau.max().clamp_min(1e-9)
    return torch.mean((dz - dtau) ** 2)


def demonstration_tensors(
    states: list[np.ndarray],
    actions: list[np.ndarray],
    state_scale: np.ndarray,
    action_low: np.ndarray,
    action_high: np.ndarray,
    seq_len: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Resample demonstrations to ``seq_len`` and normalise them for the VAE.

    States become ``(s - s_0) / state_scale``; actions are mapped to [-1, 1] with the
    action range.
    """
    s_out, a_out = [], []
    arange = np.maximum(action_high - action_low, 1e-6)
    for s, a in zip(states, actions, strict=True):
        s = resample(s, seq_len)
        a = resample(a, seq_len)
        s_out.append((s - s[0]) / state_scale)
        a_out.append(2.0 * (a - action_low) / arange - 1.0)
    return (
        torch.as_tensor(np.stack(s_out), dtype=torch.float32),
        torch.as_tensor(np.stack(a_out), dtype=torch.float32),
    )


def cosine_lr(step: int, total: int, warmup: int) -> float:
    """Learning-rate multiplier: linear warm-up then cosine decay to 0.1."""
    if step < warmup:
        return (step + 1) / max(1, warmup)
    frac = (step - warmup) / max(1, total - warmup)
    return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, frac)))
