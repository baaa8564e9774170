"""Noise-prediction denoisers conditioned on observations and on the behaviour latent z.

z enters every layer through FiLM, ``x * (1 + scale(z)) + shift(z)``, with the FiLM
projection zero-initialised so an untrained PDP starts as a plain diffusion policy.
Three architectures share one signature ``forward(x, t, obs, z) -> eps``:

* :class:`ResidualMLPDenoiser` - the paper's residual MLP over the flattened chunk (default;
  fast at batch 1).
* :class:`ConditionalUnet1D` - a temporal 1D-conv U-Net (Chi et al. 2023) with the same
  z-FiLM in every residual block.
* :class:`ReferenceFiLMMLP` - the PDP reference code's denoiser (z-MLP, z concatenated to the
  input and FiLM in every block).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import cast

import torch
from torch import nn

from policies.diffusion.configuration_pdp import PDPConfig


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal embedding (B, dim) of diffusion steps ``t`` (B,)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    args = t.float()[:, None] * freqs[None, :]
    return torch.cat((torch.sin(args), torch.cos(args)), dim=-1)


def film(h: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
    """``h * (1 + scale) + shift`` with ``(scale, shift)`` the two halves of ``params``.

    Args:
        h: (B, C) features, or (B, C, T) over a chunk (one scale and shift for all T steps).
        params: (B, 2 C) projected conditioning, scale first.
    """
    scale, shift = params.chunk(2, dim=-1)
    if h.ndim == 3:
        scale, shift = scale[..., None], shift[..., None]
    return h * (1.0 + scale) + shift


class ZFiLM(nn.Module):
    """FiLM by z: ``h * (1 + scale(z)) + shift(z)``, zero-initialised (identity at init).

    Args:
        z_dim: Latent size; 0 makes the layer the identity with no parameters.
        channels: Feature size modulated.
    """

    def __init__(self, z_dim: int, channels: int) -> None:
        super().__init__()
        self.proj: nn.Linear | None = None
        if z_dim > 0:
            self.proj = nn.Linear(z_dim, 2 * channels)
            nn.init.zeros_(self.proj.weight)
            nn.init.zeros_(self.proj.bias)

    def forward(self, h: torch.Tensor, z: torch.Tensor | None) -> torch.Tensor:
        """Modulate ``h`` (B, C) or (B, C, T) by ``z`` (B, z_dim)."""
        if self.proj is None or z is None:
            return h
        return film(h, self.proj(z))


class CondFiLM(nn.Module):
    """FiLM by the observation/timestep embedding (standard diffusion-policy conditioning)."""

    def __init__(self, cond_dim: int, channels: int) -> None:
        super().__init__()
        self.proj = nn.Sequential(nn.Mish(), nn.Linear(cond_dim, 2 * channels))

    def forward(self, h: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """Modulate ``h`` (B, C) or (B, C, T) by ``cond`` (B, cond_dim)."""
        return film(h, self.proj(cond))


class _CondEncoder(nn.Module):
    """Embeds (observation history, diffusion step) into one conditioning vector."""

    def __init__(self, config: PDPConfig, out_dim: int) -> None:
        super().__init__()
        self.t_dim = config.time_embed_dim
        self.time_mlp = nn.Sequential(
            nn.Linear(self.t_dim, 2 * self.t_dim), nn.Mish(), nn.Linear(2 * self.t_dim, self.t_dim)
        )
        self.obs_mlp = nn.Sequential(
            nn.Linear(config.obs_cond_dim, out_dim), nn.Mish(), nn.Linear(out_dim, out_dim)
        )
        self.out = nn.Linear(out_dim + self.t_dim, out_dim)

    def forward(self, t: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        temb = self.time_mlp(timestep_embedding(t, self.t_dim))
        return self.out(torch.cat((self.obs_mlp(obs), temb), dim=-1))


class _ResBlock(nn.Module):
    def __init__(self, width: int, cond_dim: int, z_dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, width)
        self.cond_film = CondFiLM(cond_dim, width)
        self.z_film = ZFiLM(z_dim, width)
        self.act = nn.Mish()
        self.fc2 = nn.Linear(width, width)


Film = tuple[torch.Tensor, torch.Tensor] | None
"""Per-layer affine modulation ``(mult, add)``: ``y -> y * mult + add`` (None = identity)."""


def _compose(cond: tuple[torch.Tensor, torch.Tensor], z: Film) -> Film:
    """FiLM(z) after FiLM(cond) as one affine map."""
    mult, add = 1.0 + cond[0], cond[1]
    if z is None:
        return mult, add
    return mult * z[0], add * z[0] + z[1]


class ResidualMLPDenoiser(nn.Module):
    """Residual MLP over the flattened action chunk, FiLM(z) in every layer.

    The FiLM parameters of all layers depend only on (diffusion step, observation, z), so
    :meth:`films` computes them for all sampling steps in one batched call and
    :meth:`forward_films` runs the per-step trunk (few ops: fast at batch 1).
    """

    def __init__(self, config: PDPConfig) -> None:
        super().__init__()
        w = config.hidden_dim
        self.cond = _CondEncoder(config, config.cond_dim)
        self.inp = nn.Linear(config.chunk_dim, w)
        self.in_film = ZFiLM(config.z_dim, w)
        self.blocks = nn.ModuleList(
            _ResBlock(w, config.cond_dim, config.z_dim) for _ in range(config.n_blocks)
        )
        self.out_norm = nn.LayerNorm(w)
        self.out_film = ZFiLM(config.z_dim, w)
        self.out = nn.Linear(w, config.chunk_dim)
        self.horizon, self.action_dim = config.horizon, config.action_dim

    @staticmethod
    def _zfilm(layer: ZFiLM, z: torch.Tensor | None) -> Film:
        if layer.proj is None or z is None:
            return None
        scale, shift = layer.proj(z).chunk(2, dim=-1)
        return 1.0 + scale, shift

    def films(self, t: torch.Tensor, obs: torch.Tensor, z: torch.Tensor | None) -> list[Film]:
        """FiLM ``(mult, add)`` of every layer: input, each block, output."""
        cond = self.cond(t, obs)
        out: list[Film] = [self._zfilm(self.in_film, z)]
        for block in cast("list[_ResBlock]", self.blocks):
            cs = block.cond_film.proj(cond).chunk(2, dim=-1)
            out.append(_compose((cs[0], cs[1]), self._zfilm(block.z_film, z)))
        out.append(self._zfilm(self.out_film, z))
        return out

    def forward_films(self, x: torch.Tensor, films: list[Film]) -> torch.Tensor:
        """The trunk given precomputed FiLM parameters (see :meth:`films`)."""
        h = self.inp(x.flatten(1))
        if films[0] is not None:
            h = torch.addcmul(films[0][1], h, films[0][0])
        for block, film in zip(cast("list[_ResBlock]", self.blocks), films[1:-1], strict=True):
            y = block.fc1(block.norm(h))
            y = torch.addcmul(film[1], y, film[0])  # type: ignore[index]
            h = h + block.fc2(block.act(y))
        h = self.out_norm(h)
        if films[-1] is not None:
            h = torch.addcmul(films[-1][1], h, films[-1][0])
        return self.out(h).view(-1, self.horizon, self.action_dim)

    def forward(
        self, x: torch.Tensor, t: torch.Tensor, obs: torch.Tensor, z: torch.Tensor | None
    ) -> torch.Tensor:
        """Predict noise.

        Args:
            x: (B, horizon, action_dim) noisy normalised actions.
            t: (B,) diffusion steps.
            obs: (B, obs_cond_dim) conditioning (state history, camera and instruction features).
            z: (B, z_dim) behaviour latent, or None for the plain policy.

        Returns:
            (B, horizon, action_dim) predicted noise.
        """
        return self.forward_films(x, self.films(t, obs, z))


class _Conv1dBlock(nn.Sequential):
    def __init__(self, cin: int, cout: int, kernel: int) -> None:
        groups = 8 if cout % 8 == 0 else 1
        super().__init__(
            nn.Conv1d(cin, cout, kernel, padding=kernel // 2), nn.GroupNorm(groups, cout), nn.Mish()
        )


class _CondResBlock1D(nn.Module):
    def __init__(self, cin: int, cout: int, cond_dim: int, z_dim: int, kernel: int) -> None:
        super().__init__()
        self.block1 = _Conv1dBlock(cin, cout, kernel)
        self.block2 = _Conv1dBlock(cout, cout, kernel)
        self.cond_film = CondFiLM(cond_dim, cout)
        self.z_film = ZFiLM(z_dim, cout)
        self.skip = nn.Conv1d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, cond: torch.Tensor, z: torch.Tensor | None) -> torch.Tensor:
        h = self.z_film(self.cond_film(self.block1(x), cond), z)
        return self.block2(h) + self.skip(x)


class ConditionalUnet1D(nn.Module):
    """Temporal 1D-conv U-Net over (B, action_dim, horizon) with FiLM(cond) and FiLM(z)."""

    def __init__(self, config: PDPConfig) -> None:
        super().__init__()
        chans = config.unet_channels
        cond_dim = chans[-1]
        k, zd = config.kernel_size, config.z_dim
        self.cond = _CondEncoder(config, cond_dim)
        self.down = nn.ModuleList()
        cin = config.action_dim
        for i, c in enumerate(chans):
            last = i == len(chans) - 1
            self.down.append(
                nn.ModuleList(
                    [
                        _CondResBlock1D(cin, c, cond_dim, zd, k),
                        nn.Conv1d(c, c, 3, stride=2, padding=1) if not last else nn.Identity(),
                    ]
                )
            )
            cin = c
        self.mid = _CondResBlock1D(chans[-1], chans[-1], cond_dim, zd, k)
        self.up = nn.ModuleList()
        for i in reversed(range(len(chans) - 1)):
            self.up.append(
                nn.ModuleList(
                    [
                        nn.ConvTranspose1d(chans[i + 1], chans[i + 1], 4, stride=2, padding=1),
                        _CondResBlock1D(chans[i + 1] + chans[i], chans[i], cond_dim, zd, k),
                    ]
                )
            )
        self.final = nn.Sequential(
            _Conv1dBlock(chans[0], chans[0], k), nn.Conv1d(chans[0], config.action_dim, 1)
        )

    def forward(
        self, x: torch.Tensor, t: torch.Tensor, obs: torch.Tensor, z: torch.Tensor | None
    ) -> torch.Tensor:
        """Same contract as :meth:`ResidualMLPDenoiser.forward`."""
        cond = self.cond(t, obs)
        h = x.transpose(1, 2)
        skips = []
        for level in self.down:
            res_block, down = level[0], level[1]  # type: ignore[index]
            h = res_block(h, cond, z)
            skips.append(h)
            h = down(h)
        h = self.mid(h, cond, z)
        skips.pop()
        for level in self.up:
            upsample, up_block = level[0], level[1]  # type: ignore[index]
            h = upsample(h)
            h = up_block(torch.cat((h, skips.pop()), dim=1), cond, z)
        return self.final(h).transpose(1, 2)


class _SinusoidalPosEmb(nn.Module):
    """The reference's sinusoidal step embedding (frequencies ``exp(-log(1e4) i / (half-1))``)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        half = self.dim // 2
        freqs = torch.exp(torch.arange(half) * -(math.log(10000.0) / (half - 1)))
        args = t.float()[:, None] * freqs[None, :]
        return torch.cat((args.sin(), args.cos()), dim=-1)


class _ReferenceMLP(nn.Module):
    """The reference's ``MLP``: Linear + Mish per layer, identity after the last; its module
    names (``moduleList.<i>.linear_1``) so reference checkpoints load by key."""

    def __init__(self, dims: list[int]) -> None:
        super().__init__()
        n = len(dims) - 1
        self.moduleList = nn.ModuleList(
            nn.Sequential(
                OrderedDict(
                    [
                        ("linear_1", nn.Linear(dims[i], dims[i + 1])),
                        ("act_1", nn.Mish() if i < n - 1 else nn.Identity()),
                    ]
                )
            )
            for i in range(n)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.moduleList:
            x = layer(x)
        return x


class _ReferenceFiLM(nn.Module):
    """``x * (1 + scale(z)) + shift(z)`` with separate zero-initialised scale/shift layers."""

    def __init__(self, features: int, cond_dim: int) -> None:
        super().__init__()
        self.scale_net = nn.Linear(cond_dim, features)
        self.shift_net = nn.Linear(cond_dim, features)
        for net in (self.scale_net, self.shift_net):
            nn.init.zeros_(net.weight)
            nn.init.zeros_(net.bias)

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return x * (1 + self.scale_net(z)) + self.shift_net(z)


class ReferenceFiLMMLP(nn.Module):
    """The PDP reference denoiser (``FiLMDiffusionMLP`` of Valarzz/pdp ``model/diffusion.py``).

    z goes through a z-MLP (``z_mlp_dims``, 2 -> 16 -> 32 in the reference); the processed z
    is concatenated to the input together with the flattened noisy chunk, the step embedding
    and the observation, and FiLM-modulates every block (Linear, LayerNorm, FiLM, Mish except
    after the last block, residual). Module names follow the reference, so its checkpoints
    (``model_state_dict``) load by key. With ``z_dim == 0`` (the plain DP baseline, which the
    reference does not have) the z-MLP, the z input and the FiLM layers are left out.
    """

    z_empty: torch.Tensor

    def __init__(self, config: PDPConfig) -> None:
        super().__init__()
        dims = [config.hidden_dim] * config.n_blocks
        t_dim = config.time_embed_dim
        self.time_dim = t_dim
        self.horizon, self.action_dim = config.horizon, config.action_dim
        self.time_embedding = nn.Sequential(
            _SinusoidalPosEmb(t_dim),
            nn.Linear(t_dim, 2 * t_dim),
            nn.Mish(),
            nn.Linear(2 * t_dim, t_dim),
        )
        self.z_processor: nn.Module | None = None
        z_proc = 0
        if config.uses_z:
            self.z_processor = _ReferenceMLP([config.z_dim, *config.z_mlp_dims])
            z_proc = config.z_mlp_dims[-1]
        self.register_buffer("z_empty", torch.zeros(1, max(config.z_dim, 1)))
        self.input_proj = nn.Linear(
            t_dim + config.chunk_dim + config.obs_cond_dim + z_proc, dims[0]
        )
        self.blocks = nn.ModuleList(nn.Linear(dims[max(i - 1, 0)], d) for i, d in enumerate(dims))
        self.layer_norms = nn.ModuleList(nn.LayerNorm(d) for d in dims)
        self.film_layers = nn.ModuleDict(
            {str(i): _ReferenceFiLM(d, z_proc) for i, d in enumerate(dims)} if z_proc else {}
        )
        self.output_proj = nn.Linear(dims[-1], config.chunk_dim)
        self.activation = nn.Mish()

    def forward(
        self, x: torch.Tensor, t: torch.Tensor, obs: torch.Tensor, z: torch.Tensor | None
    ) -> torch.Tensor:
        """Same contract as :meth:`ResidualMLPDenoiser.forward`."""
        b = x.shape[0]
        parts = [x.reshape(b, -1), self.time_embedding(t.reshape(b)), obs.reshape(b, -1)]
        z_proc = None
        if self.z_processor is not None:
            z_proc = self.z_processor(self.z_empty.expand(b, -1) if z is None else z)
            parts.append(z_proc)
        h = self.input_proj(torch.cat(parts, dim=-1))
        last = len(self.blocks) - 1
        for i, (block, norm) in enumerate(zip(self.blocks, self.layer_norms, strict=True)):
            residual = h
            h = norm(block(h))
            if z_proc is not None:
                h = self.film_layers[str(i)](h, z_proc)
            if i < last:
                h = self.activation(h)
            if residual.shape == h.shape:
                h = h + residual
        return self.output_proj(h).view(b, self.horizon, self.action_dim)


DENOISER_CLASSES: dict[str, type[nn.Module]] = {
    "mlp": ResidualMLPDenoiser,
    "unet": ConditionalUnet1D,
    "film_mlp": ReferenceFiLMMLP,
}
"""``PDPConfig.denoiser`` -> class."""
