"""The PDP network: normaliser + z-conditioned denoiser + DDPM/DDIM schedules (+ manifold).

Training uses diffusers' :class:`~diffusers.DDPMScheduler` (cosine schedule) to noise
actions; sampling runs DDIM (eta = 0) with its coefficients precomputed from diffusers'
:class:`~diffusers.DDIMScheduler` into buffers, so the sampling loop is a few fused tensor
ops per step with no scheduler objects or Python dicts in the way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from diffusers import DDIMScheduler, DDPMScheduler
from torch import nn

from embodied.errors import CheckpointError, ConfigError
from policies.diffusion.configuration_pdp import PDPConfig
from policies.diffusion.modeling_denoiser import DENOISER_CLASSES, ResidualMLPDenoiser
from policies.diffusion.modeling_manifold import (
    ReferenceTrajectoryVAE,
    TrajectoryVAE,
    demonstration_tensors,
)
from policies.diffusion.modeling_vision import ObservationEncoder
from policies.diffusion.processor_pdp import Demonstrations, hold_pad, to_model_space
from policies.diffusion.rtc import RTCGuide

STAT_KEYS = ("state_min", "state_max", "action_min", "action_max", "z_mean", "z_whiten")
"""Normalisation statistics stored inside every checkpoint (``normalizer.<key>``)."""


class Normalizer(nn.Module):
    """Min-max normalisation of states/actions to [-1, 1] and whitening of z.

    The knob space of z is the ZCA-whitened encoder latent, ``k = W (z - mean)`` with
    ``W = Cov(z)^(-1/2)`` over the training demonstrations, so the prior N(0, I) matches the
    demonstrations' spread and orientation whatever scale the encoder settled on.

    Statistics are buffers initialised to NaN: using a normaliser whose statistics were
    never set (or failed to load) raises instead of passing values through.
    """

    state_min: torch.Tensor
    state_max: torch.Tensor
    action_min: torch.Tensor
    action_max: torch.Tensor
    z_mean: torch.Tensor
    z_whiten: torch.Tensor

    def __init__(self, state_dim: int, action_dim: int, z_dim: int) -> None:
        super().__init__()
        nan = float("nan")
        self.register_buffer("state_min", torch.full((state_dim,), nan))
        self.register_buffer("state_max", torch.full((state_dim,), nan))
        self.register_buffer("action_min", torch.full((action_dim,), nan))
        self.register_buffer("action_max", torch.full((action_dim,), nan))
        self.register_buffer("z_mean", torch.zeros(max(z_dim, 1)))
        self.register_buffer("z_whiten", torch.eye(max(z_dim, 1)))

    def set_stats(self, **stats: np.ndarray | torch.Tensor) -> None:
        """Set statistics by name (see :data:`STAT_KEYS`), checking their shapes."""
        for key, value in stats.items():
            if key not in STAT_KEYS:
                raise ConfigError(f"unknown normaliser statistic {key!r}; known: {STAT_KEYS}")
            buf = getattr(self, key)
            t = torch.as_tensor(np.asarray(value, dtype=np.float32))
            if t.shape != buf.shape:
                raise ConfigError(
                    f"statistic {key!r} has shape {tuple(t.shape)}, expected {tuple(buf.shape)}",
                    fix="compute statistics on data with the policy's state/action dims",
                )
            buf.copy_(t)

    def check(self) -> None:
        """Raise if any statistic is unset (NaN) or degenerate."""
        for key in STAT_KEYS:
            buf = getattr(self, key)
            if not torch.isfinite(buf).all():
                raise CheckpointError(
                    f"normaliser statistic {key!r} is not set (contains NaN/inf)",
                    fix="train with `embodied train pdp` or load a checkpoint holding the stats",
                )
        if torch.linalg.matrix_rank(self.z_whiten.double()) < self.z_whiten.shape[0]:
            raise CheckpointError(
                f"normaliser z_whiten {self.z_whiten.tolist()} is singular",
                fix="re-train: the demonstration latents collapsed (raise kl/geo weights)",
            )

    @staticmethod
    def _scale(lo: torch.Tensor, hi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        half = ((hi - lo) / 2.0).clamp_min(1e-6)
        return (hi + lo) / 2.0, half

    def norm_state(self, s: torch.Tensor) -> torch.Tensor:
        """States -> [-1, 1]."""
        mid, half = self._scale(self.state_min, self.state_max)
        return (s - mid) / half

    def norm_action(self, a: torch.Tensor) -> torch.Tensor:
        """Actions -> [-1, 1]."""
        mid, half = self._scale(self.action_min, self.action_max)
        return (a - mid) / half

    def unnorm_action(self, a: torch.Tensor) -> torch.Tensor:
        """[-1, 1] -> actions."""
        mid, half = self._scale(self.action_min, self.action_max)
        return a * half + mid

    def latent_to_knob(self, z: torch.Tensor) -> torch.Tensor:
        """Raw encoder latent -> knob space (standardised)."""
        return (z - self.z_mean) @ self.z_whiten.T


class PDPModel(nn.Module):
    """Denoiser, normaliser, schedules and (for PDP) the behaviour manifold.

    The denoiser is conditioned on the *knob-space* z (standardised latent), so knob value,
    adaptation variable and conditioning input are the same numbers.

    Args:
        config: Policy configuration.
    """

    alphas_cumprod: torch.Tensor
    ddim_timesteps: torch.Tensor
    ddim_coefs: torch.Tensor
    train_scheduler: Any
    ddim_scheduler: Any

    def __init__(self, config: PDPConfig) -> None:
        super().__init__()
        self.config = config
        self.normalizer = Normalizer(config.state_dim, config.action_dim, config.z_dim)
        self.denoiser = DENOISER_CLASSES[config.denoiser](config)
        self.obs_encoder: ObservationEncoder | None = None
        if config.vision.enabled:
            self.obs_encoder = ObservationEncoder(config.vision, config.n_obs_steps)
        self.manifold: TrajectoryVAE | ReferenceTrajectoryVAE | None = None
        if config.uses_z:
            vae = (
                ReferenceTrajectoryVAE
                if config.manifold.architecture == "reference"
                else TrajectoryVAE
            )
            self.manifold = vae(config.manifold, config.state_dim, config.action_dim)
        self.train_scheduler = DDPMScheduler(
            num_train_timesteps=config.num_train_timesteps,
            beta_schedule=config.beta_schedule,
            clip_sample=config.clip_sample,
            prediction_type="epsilon",
        )
        self.register_buffer(
            "alphas_cumprod", self.train_scheduler.alphas_cumprod.clone().float(), persistent=False
        )
        self._precompute_ddim()

    def _precompute_ddim(self) -> None:
        """DDIM (eta=0) coefficients per sampling step, taken from diffusers' DDIMScheduler."""
        cfg = self.config
        ddim: Any = DDIMScheduler(
            num_train_timesteps=cfg.num_train_timesteps,
            beta_schedule=cfg.beta_schedule,
            clip_sample=cfg.clip_sample,
            set_alpha_to_one=True,
            prediction_type="epsilon",
        )
        ddim.set_timesteps(cfg.num_inference_steps)
        self.ddim_scheduler = ddim
        ts = ddim.timesteps.long()
        acp = ddim.alphas_cumprod.double()
        step = cfg.num_train_timesteps // cfg.num_inference_steps
        a_t = acp[ts]
        prev = ts - step
        a_prev = torch.where(prev >= 0, acp[prev.clamp_min(0)], ddim.final_alpha_cumprod.double())
        # x0 = (x - sqrt(1-a_t) eps) / sqrt(a_t);  x_prev = sqrt(a_prev) x0 + sqrt(1-a_prev) eps
        coefs = torch.stack(
            (
                1.0 / a_t.sqrt(),
                (1.0 - a_t).sqrt() / a_t.sqrt(),
                a_prev.sqrt(),
                (1.0 - a_prev).sqrt(),
            ),
            dim=1,
        ).float()
        self.register_buffer("ddim_timesteps", ts, persistent=False)
        self.register_buffer("ddim_coefs", coefs, persistent=False)
        self._coef_list: list[tuple[float, float, float, float]] = [
            (float(r[0]), float(r[1]), float(r[2]), float(r[3])) for r in coefs.tolist()
        ]

    # ---- manifold -------------------------------------------------------------------------
    def manifold_inputs(
        self, states: list[np.ndarray], actions: list[np.ndarray]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Demonstrations as the manifold encoder takes them (normalised, states relative to
        the start, actions in the model's action space).

        ``compact``: resampled to ``manifold.seq_len`` steps; ``reference``: held/cut to the
        policy horizon (:func:`~policies.diffusion.processor_pdp.hold_pad`).
        """
        cfg = self.config
        norm = self.normalizer
        smin, smax = norm.state_min.double().numpy(), norm.state_max.double().numpy()
        reference = cfg.manifold.architecture == "reference"
        demos = Demonstrations(list(states), list(actions))
        if reference:
            demos = hold_pad(demos, cfg.horizon)
        demos = to_model_space(demos, cfg)
        states, actions = demos.states, demos.actions
        return demonstration_tensors(
            [np.asarray(s, np.float64) for s in states],
            [np.asarray(a, np.float64) for a in actions],
            np.maximum((smax - smin) / 2.0, 1e-6),
            norm.action_min.double().numpy(),
            norm.action_max.double().numpy(),
            cfg.horizon if reference else cfg.manifold.seq_len,
            resample_to_length=not reference,
        )

    def encode_demonstrations(
        self, states: list[np.ndarray], actions: list[np.ndarray]
    ) -> torch.Tensor:
        """Raw encoder means (N, z_dim) of demonstrations (knob space: ``latent_to_knob``).

        Raises:
            ConfigError: the policy has no manifold (``z_dim == 0``).
        """
        if self.manifold is None:
            raise ConfigError(
                "this policy has no behaviour manifold (z_dim=0)",
                fix="encode demonstrations with a PDP trained with z_dim > 0",
            )
        s, a = self.manifold_inputs(states, actions)
        was_training = self.manifold.training
        self.manifold.eval()
        try:
            with torch.no_grad():
                mu, _ = self.manifold.encode(s, a)
        finally:
            self.manifold.train(was_training)
        return mu

    # ---- conditioning helpers -------------------------------------------------------------
    def encode_state(self, history: torch.Tensor) -> torch.Tensor:
        """Raw state history (B, n_obs_steps, state_dim) -> flat normalised state conditioning."""
        dims = self.config.obs_dims
        obs = self.normalizer.norm_state(history)
        if dims is not None and len(dims) != self.config.state_dim:
            obs = obs[..., list(dims)]
        return obs.reshape(history.shape[0], -1)

    def encode_obs(
        self,
        history: torch.Tensor,
        images: torch.Tensor | None = None,
        text: torch.Tensor | None = None,
        offsets: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The denoiser's conditioning (B, obs_cond_dim) from raw observations.

        Args:
            history: (B, n_obs_steps, state_dim) raw states.
            images: (B, n_cams, n_obs_steps, H, W, 3) uint8 frames (visuomotor policies).
            text: (B, text_dim) instruction embeddings (language-conditioned policies).
            offsets: Crop corners for training (:func:`~policies.diffusion.modeling_vision.
                crop_offsets`); None = the centre crop.
        """
        return self.join_obs(self.encode_state(history), images, text, offsets)

    def join_obs(
        self,
        state_cond: torch.Tensor,
        images: torch.Tensor | None = None,
        text: torch.Tensor | None = None,
        offsets: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Encoded state history (:meth:`encode_state`) + camera/instruction features."""
        if self.obs_encoder is None:
            return state_cond
        return torch.cat((state_cond, self.obs_encoder(images, text, offsets)), dim=1)

    def policy_parameters(self) -> list[nn.Parameter]:
        """What policy training optimises: the denoiser and the observation encoder."""
        params = list(self.denoiser.parameters())
        if self.obs_encoder is not None:
            params += list(self.obs_encoder.parameters())
        return params

    def _z(self, z: torch.Tensor | None, batch: int) -> torch.Tensor | None:
        if not self.config.uses_z:
            return None
        if z is None:
            return torch.zeros(batch, self.config.z_dim)
        if z.ndim == 1:
            z = z[None].expand(batch, -1)
        if z.shape != (batch, self.config.z_dim):
            raise ConfigError(
                f"z has shape {tuple(z.shape)}, expected ({batch}, {self.config.z_dim})"
            )
        return z

    # ---- training -------------------------------------------------------------------------
    def compute_loss(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        z: torch.Tensor | None,
        generator: torch.Generator | None = None,
        timesteps: torch.Tensor | None = None,
        noise: torch.Tensor | None = None,
        images: torch.Tensor | None = None,
        text: torch.Tensor | None = None,
        offsets: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Denoising (epsilon-prediction) MSE.

        Args:
            obs: (B, n_obs_steps * len(obs_dims)) encoded state history (:meth:`encode_state`);
                visuomotor/language policies add their camera and instruction features from
                ``images``/``text`` here, so the observation encoder trains with the denoiser.
            actions: (B, horizon, action_dim) normalised action chunks.
            z: (B, z_dim) knob-space latents (None for the plain policy).
            generator: Generator for noise and timesteps.
            timesteps: Optional fixed diffusion steps (B,).
            noise: Optional fixed noise like ``actions``.
            images: (B, n_cams, n_obs_steps, H, W, 3) uint8 frames.
            text: (B, text_dim) instruction embeddings.
            offsets: Crop corners (random crops in training).
        """
        obs = self.join_obs(obs, images, text, offsets)
        b = actions.shape[0]
        if noise is None:
            noise = torch.randn(actions.shape, generator=generator)
        if timesteps is None:
            timesteps = torch.randint(0, self.config.num_train_timesteps, (b,), generator=generator)
        noisy = self.train_scheduler.add_noise(actions, noise, timesteps)
        pred = self.denoiser(noisy, timesteps, obs, self._z(z, b))
        return torch.mean((pred - noise) ** 2)

    # ---- sampling -------------------------------------------------------------------------
    def sample(
        self,
        obs: torch.Tensor,
        z: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
        noise: torch.Tensor | None = None,
        guide: RTCGuide | None = None,
    ) -> torch.Tensor:
        """DDIM-sample normalised action chunks.

        Args:
            obs: (B, obs_cond_dim) conditioning from :meth:`encode_obs`.
            z: (B, z_dim) or (z_dim,) knob-space latent (PDP); ignored by the plain policy.
            generator: Noise generator.
            noise: Optional initial noise (B, horizon, action_dim).
            guide: Real-time chunking: inpaint the chunk's first rows toward a prefix
                (:class:`RTCGuide`, :meth:`_guided_step`).

        Returns:
            (B, horizon, action_dim) normalised actions.
        """
        cfg = self.config
        b = obs.shape[0]
        x = (
            noise
            if noise is not None
            else torch.randn((b, cfg.horizon, cfg.action_dim), generator=generator)
        )
        zz = self._z(z, b)
        n = cfg.num_inference_steps
        coefs = self._coef_list
        denoiser = self.denoiser
        if guide is not None:  # every step differentiates the denoiser: the plain path
            for i in range(n):
                t_i = self.ddim_timesteps[i].expand(b)

                def eps_fn(xx: torch.Tensor, t_i: torch.Tensor = t_i) -> torch.Tensor:
                    return denoiser(xx, t_i, obs, zz)  # type: ignore[no-any-return]

                x = self._guided_step(x, eps_fn, coefs[i], guide)
            return x
        if isinstance(denoiser, ResidualMLPDenoiser):
            # FiLM parameters of all steps in one batched call, then a lean trunk per step
            t_all = self.ddim_timesteps.repeat_interleave(b)
            films = denoiser.films(t_all, obs.repeat(n, 1), None if zz is None else zz.repeat(n, 1))
            per_step = [
                None if f is None else tuple(zip(f[0].split(b), f[1].split(b), strict=True))
                for f in films
            ]
            for i in range(n):
                step_films = [None if f is None else f[i] for f in per_step]
                x = self._ddim_step(x, denoiser.forward_films(x, step_films), coefs[i])
        else:
            for i in range(n):
                eps = denoiser(x, self.ddim_timesteps[i].expand(b), obs, zz)
                x = self._ddim_step(x, eps, coefs[i])
        return x

    def _guided_step(
        self,
        x: torch.Tensor,
        eps_fn: Callable[[torch.Tensor], torch.Tensor],
        c: tuple[float, float, float, float],
        guide: RTCGuide,
    ) -> torch.Tensor:
        """One DDIM step with real-time chunking's prefix guidance (Black, Galliker and Levine
        2025, Algorithm 1), carried over from flow matching to DDIM (our adaptation, RTC is
        stated for flow policies): with ``tau`` the flow time of the same signal-to-noise ratio
        (``x_flow = x / (sqrt(a) + sqrt(1 - a))``, ``tau = sqrt(a) / (sqrt(a) + sqrt(1 - a))``,
        1 = clean), the DDIM step runs as without guidance and the sample then moves as RTC's
        Euler step moves it, ``x_flow += (tau_next - tau) * w * J^T (W * (Y - x0))`` with
        ``J = d x0 / d x_flow`` and
        ``w = min(beta, (1 - tau) / tau * (tau^2 + (1 - tau)^2) / (1 - tau)^2)``. Without
        clipping this equals moving the clean estimate by ``(1 - tau) w J^T e`` inside the step.
        """
        sqrt_a = 1.0 / c[0]
        sqrt_1ma = c[1] * sqrt_a
        k = sqrt_a + sqrt_1ma  # d x_ddpm / d x_flow
        tau = sqrt_a / k
        if guide.jacobian == "identity":  # our ablation: J = I in flow coordinates
            eps = eps_fn(x)
            x0 = x * c[0] - eps * c[1]
            corr = (guide.prefix - x0) * guide.weights[None, :, None]
        else:
            with torch.enable_grad():
                xr = x.detach().requires_grad_(True)
                eps = eps_fn(xr)
                x0 = xr * c[0] - eps * c[1]
                error = (guide.prefix - x0) * guide.weights[None, :, None]
                corr = torch.autograd.grad(x0, xr, error)[0] * k
        c_tau = (1.0 - tau) / tau
        inv_r2 = (tau**2 + (1.0 - tau) ** 2) / max((1.0 - tau) ** 2, 1e-12)
        weight = min(guide.max_guidance_weight, c_tau * inv_r2)
        # RTC's Euler step adds d_tau * w * corr to the flow sample; the DDIM step (and its
        # clipping) runs as without guidance, then moves by that displacement in its own
        # coordinates (x_ddpm = k * x_flow at the next noise level)
        k_next = c[2] + c[3]
        tau_next = c[2] / k_next
        step = self._ddim_step(x, eps.detach(), c)
        return step + k_next * (tau_next - tau) * weight * corr

    def _ddim_step(
        self, x: torch.Tensor, eps: torch.Tensor, c: tuple[float, float, float, float]
    ) -> torch.Tensor:
        x0 = torch.add(x * c[0], eps, alpha=-c[1])
        if self.config.clip_sample:
            x0 = x0.clamp_(-1.0, 1.0)
            if self.config.recompute_eps:  # the noise consistent with the clipped x0
                eps = (x * c[0] - x0) / c[1]
        return torch.add(x0 * c[2], eps, alpha=c[3])
