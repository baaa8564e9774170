"""The behaviour manifold: a trajectory VAE with a geometry-preserving latent space.

Two architectures (``ManifoldConfig.architecture``): :class:`ReferenceTrajectoryVAE`, the
reference code's, and :class:`TrajectoryVAE`, the project's compact one described here.
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


def soft_dtw(
    x: torch.Tensor | np.ndarray, y: torch.Tensor | np.ndarray, gamma: float, chunk: int = 1024
) -> torch.Tensor:
    """Soft-DTW (Cuturi & Blondel 2017) between batches of sequences, in float64.

    Computed along anti-diagonals (every cell of a diagonal at once) with a stabilised
    soft-min, so gamma = 1e-5 (the PDP reference) works. It scores fixed data (the
    demonstrations' paths), so it is not differentiable.

    Args:
        x: (B, N, D) sequences.
        y: (B, M, D) sequences.
        gamma: Smoothing (> 0); gamma -> 0 recovers DTW.
        chunk: Pairs computed at once (bounds memory: chunk x N x M floats).

    Returns:
        (B,) soft-DTW values with squared-Euclidean ground cost.
    """
    xa = np.asarray(x.detach().cpu() if isinstance(x, torch.Tensor) else x, dtype=np.float64)
    ya = np.asarray(y.detach().cpu() if isinstance(y, torch.Tensor) else y, dtype=np.float64)
    out = np.empty(xa.shape[0])
    for s in range(0, xa.shape[0], chunk):
        out[s : s + chunk] = _soft_dtw_np(xa[s : s + chunk], ya[s : s + chunk], gamma)
    return torch.from_numpy(out)


def _soft_dtw_np(x: np.ndarray, y: np.ndarray, gamma: float) -> np.ndarray:
    cost = ((x[:, :, None, :] - y[:, None, :, :]) ** 2).sum(-1)  # (B, N, M)
    b, n, m = cost.shape
    r = np.full((b, n + 1, m + 1), np.inf)
    r[:, 0, 0] = 0.0
    with np.errstate(invalid="ignore", over="ignore"):
        for d in range(2, n + m + 1):  # cells (i, j) with i + j = d, 1-based
            i = np.arange(max(1, d - m), min(n, d - 1) + 1)
            j = d - i
            prev = np.stack((r[:, i - 1, j - 1], r[:, i - 1, j], r[:, i, j - 1]))
            low = prev.min(0)
            soft = low - gamma * np.log(np.exp(-(prev - low) / gamma).sum(0))
            r[:, i, j] = cost[:, i - 1, j - 1] + soft
    return r[:, n, m]


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


def _decoder_mlp(
    config: ManifoldConfig, out_dim: int, activation: type[nn.Module]
) -> nn.Sequential:
    """Both decoders' MLP on ``[z, t]``: three hidden layers of ``decoder_hidden`` units.

    The layers sit at the Sequential indices the reference's checkpoints use (0, 2, 4, 6), so
    its weights load by key; only the activation differs between the two architectures.
    """
    h = config.decoder_hidden
    return nn.Sequential(
        nn.Linear(config.z_dim + 1, h),
        activation(),
        nn.Linear(h, h),
        activation(),
        nn.Linear(h, h),
        activation(),
        nn.Linear(h, out_dim),
    )


class _ManifoldVAE(nn.Module):
    """What both trajectory VAEs share: their sizes and the reparameterised manifold loss.

    Subclasses give the encoder, decoder, reconstruction terms and L_geo; the sampling, the KL
    term and the total are the same for both, so a fix to one reaches the other.

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

    def encode(
        self, states: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(mu, logvar) of demonstrations (B, T, .)."""
        raise NotImplementedError

    def decode(self, z: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(states, actions) reconstructed from z (B, z_dim) for ``length`` steps."""
        raise NotImplementedError

    def reconstruction(
        self,
        rec_s: torch.Tensor,
        rec_a: torch.Tensor,
        states: torch.Tensor,
        actions: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(action, state) reconstruction losses of a decoded batch."""
        raise NotImplementedError

    def geometric(self, mu: torch.Tensor, path_dist: torch.Tensor) -> torch.Tensor:
        """L_geo of the encoder means ``mu`` (B, z_dim) against the path divergences."""
        raise NotImplementedError

    def loss(
        self,
        states: torch.Tensor,
        actions: torch.Tensor,
        path_dist: torch.Tensor,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The manifold loss on a batch of demonstrations.

        Args:
            states: (B, T, state_dim) normalised relative states.
            actions: (B, T, action_dim) normalised actions.
            path_dist: Path divergences in the shape the subclass's :meth:`geometric` takes.
            generator: Noise generator for the reparameterisation.

        Returns:
            Total loss and its parts as floats.
        """
        mu, logvar = self.encode(states, actions)
        eps = torch.randn(mu.shape, generator=generator, dtype=mu.dtype)
        z = mu + torch.exp(0.5 * logvar) * eps
        rec_s, rec_a = self.decode(z, states.shape[1])
        l_action, l_state = self.reconstruction(rec_s, rec_a, states, actions)
        kl = torch.mean(-0.5 * torch.sum(1 + logvar - mu**2 - logvar.exp(), dim=-1))
        return manifold_total(self.config, l_action, l_state, kl, self.geometric(mu, path_dist))


class TrajectoryVAE(_ManifoldVAE):
    """Transformer encoder over a whole demonstration, MLP decoder on ``[z, t]``.

    Args:
        config: Manifold configuration.
        state_dim: State size.
        action_dim: Action size.
    """

    def __init__(self, config: ManifoldConfig, state_dim: int, action_dim: int) -> None:
        super().__init__(config, state_dim, action_dim)
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
        self.decoder = _decoder_mlp(config, state_dim + action_dim, nn.Mish)

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

    def reconstruction(
        self,
        rec_s: torch.Tensor,
        rec_a: torch.Tensor,
        states: torch.Tensor,
        actions: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """MSE of actions and states over all L steps."""
        return torch.mean((rec_a - actions) ** 2), torch.mean((rec_s - states) ** 2)

    def geometric(self, mu: torch.Tensor, path_dist: torch.Tensor) -> torch.Tensor:
        """L_geo over all pairs; ``path_dist`` is (B, B) normalised soft-DTW divergences."""
        return geometric_loss(mu, path_dist)


class _PositionalEncoding(nn.Module):
    """The reference's fixed sinusoidal positions (up to ``max_len`` tokens)."""

    pe: torch.Tensor

    def __init__(self, d_model: int, max_len: int = 500) -> None:
        super().__init__()
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div)
        pe[:, 1::2] = torch.cos(position * div)
        self.register_buffer("pe", pe)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[1] > self.pe.shape[0]:
            raise ValueError(f"{x.shape[1]} tokens exceed the {self.pe.shape[0]} positions")
        return x + self.pe[: x.shape[1]].unsqueeze(0)


class _ReferenceEncoder(nn.Module):
    def __init__(self, config: ManifoldConfig, state_dim: int, action_dim: int) -> None:
        super().__init__()
        d = config.d_model
        self.hidden_dim = d
        self.state_proj = nn.Linear(state_dim, d)
        self.action_proj = nn.Linear(action_dim, d)
        self.pos_encoding = _PositionalEncoding(d, max_len=500)
        layer = nn.TransformerEncoderLayer(
            d_model=d,
            nhead=config.n_heads,
            dim_feedforward=4 * d,
            dropout=config.dropout,
            activation="gelu",
            batch_first=True,
        )
        self.transformer = nn.TransformerEncoder(
            layer, num_layers=config.n_layers, enable_nested_tensor=False
        )
        self.to_latent_mean = nn.Linear(d, config.z_dim)
        self.to_latent_logvar = nn.Linear(d, config.z_dim)


class _ReferenceDecoder(nn.Module):
    def __init__(self, config: ManifoldConfig, state_dim: int, action_dim: int) -> None:
        super().__init__()
        self.mlp = _decoder_mlp(config, state_dim + action_dim, nn.ReLU)


class ReferenceTrajectoryVAE(_ManifoldVAE):
    """The PDP reference's trajectory VAE (Valarzz/pdp ``model/encoder.py``, ``TrajectoryVAE``).

    Encoder: interleaved state/action tokens of a whole demonstration (normalised, relative to
    its first state, at the policy horizon's length), fixed sinusoidal positions, a post-norm
    transformer (GELU, feed-forward 4 d, dropout), the LAST token's features give
    ``(mu, log sigma^2)``. Decoder: a ReLU MLP on ``[z, t]`` predicting states ``s_1..s_{T-1}``
    (``s_0`` is 0 in relative coordinates) and actions ``a_0..a_{T-1}``. Loss (``train_encoder.py``):
    MSE(actions) + MSE(states) + kl_weight * KL + geo_weight * L_geo, with L_geo on the encoder
    MEANS of rolled batch pairs (``z`` vs ``roll(z, 1)``) against the soft-DTW divergences of
    their end-effector paths, each divided by its batch maximum. Module names follow the
    reference, so its checkpoints load by key.

    Args:
        config: Manifold configuration (``architecture == "reference"``).
        state_dim: State size.
        action_dim: Action size.
    """

    def __init__(self, config: ManifoldConfig, state_dim: int, action_dim: int) -> None:
        super().__init__(config, state_dim, action_dim)
        self.encoder = _ReferenceEncoder(config, state_dim, action_dim)
        self.decoder = _ReferenceDecoder(config, state_dim, action_dim)

    def encode(
        self, states: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(mu, logvar) of demonstrations (B, T, .), normalised and relative to their start."""
        enc = self.encoder
        b, length, _ = states.shape
        tokens = torch.stack((enc.state_proj(states), enc.action_proj(actions)), dim=2)
        tokens = tokens.reshape(b, 2 * length, enc.hidden_dim)
        out = enc.transformer(enc.pos_encoding(tokens))[:, -1, :]
        return enc.to_latent_mean(out), enc.to_latent_logvar(out)

    def decode(self, z: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(states s_1..s_{T-1}, actions a_0..a_{T-1}) of shape (B, T-1, .) and (B, T, .)."""
        b = z.shape[0]
        t = torch.linspace(0, 1, length, dtype=z.dtype)[None, :, None].expand(b, -1, -1)
        out = self.decoder.mlp(torch.cat((z[:, None, :].expand(-1, length, -1), t), dim=-1))
        return out[:, 1:, : self.state_dim], out[:, :, self.state_dim :]

    def reconstruction(
        self,
        rec_s: torch.Tensor,
        rec_a: torch.Tensor,
        states: torch.Tensor,
        actions: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """MSE of actions, and of states ``s_1..s_{T-1}`` (``s_0`` is 0 and not decoded)."""
        mse = torch.nn.functional.mse_loss
        return mse(rec_a, actions), mse(rec_s, states[:, 1:])

    def geometric(self, mu: torch.Tensor, path_dist: torch.Tensor) -> torch.Tensor:
        """L_geo on rolled pairs.

        Args:
            mu: (B, z_dim) encoder means.
            path_dist: (B,) soft-DTW divergences between each demonstration's path and the
                path of the one before it in the batch (``roll(paths, 1)``).
        """
        return rolled_geometric_loss(mu, path_dist)


def manifold_total(
    config: ManifoldConfig,
    l_action: torch.Tensor,
    l_state: torch.Tensor,
    kl: torch.Tensor,
    l_geo: torch.Tensor,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Both VAEs' loss: reconstruction + ``kl_weight`` KL + ``geo_weight`` L_geo, and its parts."""
    total = l_action + l_state + config.kl_weight * kl + config.geo_weight * l_geo
    parts = {"loss": total, "action": l_action, "state": l_state, "kl": kl, "geo": l_geo}
    return total, {k: v.item() for k, v in parts.items()}


def rolled_geometric_loss(z: torch.Tensor, path_dist: torch.Tensor) -> torch.Tensor:
    """The reference's L_geo: pairs ``(z_i, z_{i-1})`` of the batch (``torch.roll(z, 1, 0)``).

    Args:
        z: (B, z_dim) encoder means.
        path_dist: (B,) path divergences of the same pairs.
    """
    if z.shape[0] < 2:
        return z.sum() * 0.0
    dz = torch.sqrt(torch.sum((z - torch.roll(z, 1, 0)) ** 2, dim=1) + 1e-8)
    dz = dz / (dz.max() + 1e-8)
    dtau = path_dist / (path_dist.max() + 1e-8)
    return torch.nn.functional.mse_loss(dz, dtau)


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
    resample_to_length: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Resample demonstrations to ``seq_len`` and normalise them for the VAE.

    States become ``(s - s_0) / state_scale``; actions are mapped to [-1, 1] with the
    action range. ``resample_to_length=False`` (the reference) takes demonstrations that
    already have ``seq_len`` steps as they are.
    """
    s_out, a_out = [], []
    arange = np.maximum(action_high - action_low, 1e-6)
    for s, a in zip(states, actions, strict=True):
        if resample_to_length:
            s, a = resample(s, seq_len), resample(a, seq_len)
        elif len(s) != seq_len or len(a) != seq_len:
            raise ValueError(f"demonstration has {len(s)} steps, expected {seq_len}")
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
