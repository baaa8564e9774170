"""Test-time adaptation of PDP, and the weight-updating baseline of the plain diffusion policy.

* :func:`adapt_z_from_demonstration` - the reference method (Valarzz/pdp ``adapt.py``,
  ``ftl_igm``): ONE demonstration of a shifted scene; z is warm-started from the manifold
  encoder on that demonstration, then Adam on z alone (lr 3e-3, 300 steps, grad clip 1, K=16
  noise/timestep draws per step for the ``reference`` variant) minimises the frozen
  denoiser's loss on the demonstration. No weight moves. ``z_init="zero"`` (start at the prior
  mean) is an ablation, not the reference method.
* :func:`search_z_cem` - the project's extension, not in the paper or the reference code: no
  demonstration, only a constraint; the cross-entropy method over z with a user cost (e.g.
  sim rollouts that must avoid a wall), evaluated in batches.
* :func:`finetune_on_demonstration` - the baseline with the same information as one-demonstration
  adaptation: a copy of the policy (e.g. the plain DP, ``z_dim=0``) whose weights are
  fine-tuned on the demonstration with the same number of gradient steps.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from embodied.errors import ConfigError
from policies.diffusion.modeling_pdp import PDPModel
from policies.diffusion.policy_pdp import PDPPolicy
from policies.diffusion.processor_pdp import Demonstrations, policy_windows

ADAPT_STEPS = 300
"""Adam steps of one-demonstration adaptation (reference ``ftl_igm_epochs``)."""
ADAPT_LR = 3e-3
"""Adam learning rate of one-demonstration adaptation (reference ``adapt.lr``)."""
REFERENCE_SAMPLES = 16
"""Noise/timestep draws per adaptation step of the ``reference`` variant (reference
``n_timestep_samples``; its one window is the whole demonstration)."""
RECEDING_BATCH = 64
"""Windows x noise draws per adaptation step of the ``receding`` variant (its windows are the
demonstration's chunks, drawn with replacement)."""
FINETUNE_LR = 1e-4
"""Default Adam learning rate of :func:`finetune_on_demonstration` (the reference's training
learning rate; the project's receding variant trains at 2e-3 and is fine-tuned at 1e-4 too)."""
ZInit = Literal["encoder", "zero"]
"""Where one-demonstration adaptation starts: the encoder's z of the demonstration (the
reference) or the prior mean 0 (ablation)."""


@dataclass
class AdaptResult:
    """Outcome of an adaptation.

    Attributes:
        z: Adapted knob-space latent (z_dim,).
        history: Objective per step (denoising loss or CEM elite cost).
        evaluations: Number of objective evaluations (gradient steps; CEM: candidates costed).
        z_init: Knob-space start of the optimisation (gradient adaptation), else empty.
    """

    z: np.ndarray
    history: list[float] = field(default_factory=list)
    evaluations: int = 0
    z_init: np.ndarray = field(default_factory=lambda: np.zeros(0))


def _require_z(policy: PDPPolicy) -> int:
    if not policy.config.uses_z:
        raise ConfigError(
            "this policy has no behaviour latent (z_dim=0); nothing to adapt",
            fix="adapt a PDP trained with z_dim > 0 (fine-tune a plain DP with "
            "finetune_on_demonstration)",
        )
    return policy.config.z_dim


def _check_demonstration(
    policy: PDPPolicy, states: np.ndarray, actions: np.ndarray
) -> Demonstrations:
    cfg = policy.config
    if cfg.vision.enabled:
        raise ConfigError(
            f"adaptation from a demonstration takes states and actions only; this policy also "
            f"sees cameras {list(cfg.vision.cameras)} / the instruction "
            f"({cfg.vision.text_model or 'none'})",
            fix="adapt a state-only PDP, or search z with rollouts (search_z_cem)",
        )
    demonstration = Demonstrations(
        [np.asarray(states, np.float64)], [np.asarray(actions, np.float64)]
    )
    dims = (demonstration.state_dim, demonstration.action_dim)
    if dims != (cfg.state_dim, cfg.action_dim):
        raise ConfigError(
            f"demonstration has state/action dims {dims[0]}/{dims[1]}, policy expects "
            f"{cfg.state_dim}/{cfg.action_dim}",
            fix="record the demonstration on the policy's env",
        )
    return demonstration


def _windows(policy: PDPPolicy, demonstration: Demonstrations) -> tuple[torch.Tensor, torch.Tensor]:
    """The denoiser's training windows of ``demonstration`` for the policy's variant, normalised."""
    model = policy.model
    obs_np, chunks_np, _ = policy_windows(demonstration, policy.config)
    with torch.no_grad():
        obs = model.encode_obs(torch.as_tensor(obs_np, dtype=torch.float32))
        act = model.normalizer.norm_action(torch.as_tensor(chunks_np, dtype=torch.float32))
    return obs, act


def default_batch_size(policy: PDPPolicy) -> int:
    """Noise/timestep draws per step: :data:`REFERENCE_SAMPLES` for the ``reference`` variant,
    :data:`RECEDING_BATCH` for ``receding``."""
    return REFERENCE_SAMPLES if policy.config.variant == "reference" else RECEDING_BATCH


def encode_demonstration(policy: PDPPolicy, states: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """Knob-space z of one demonstration from the manifold encoder (amortised inference, no search).

    The encoder sees the demonstration preprocessed as in the policy variant's training
    (:meth:`PDPModel.encode_demonstrations`).

    Args:
        policy: A PDP (z_dim > 0) whose checkpoint holds the manifold.
        states: (T, state_dim) states of the demonstration.
        actions: (T, action_dim) actions of the demonstration.

    Returns:
        (z_dim,) encoder mean mapped to knob space, clipped to the knob bounds.
    """
    _require_z(policy)
    _check_demonstration(policy, states, actions)
    model = policy.model
    with torch.no_grad():
        raw = model.encode_demonstrations(
            [np.asarray(states, np.float64)], [np.asarray(actions, np.float64)]
        )
        k = model.normalizer.latent_to_knob(raw)[0].numpy().astype(np.float64)
    b = policy.config.z_bound
    return np.clip(k, -b, b)


def _step_batch(
    policy: PDPPolicy, what: str, steps: int, lr: float, grad_clip: float, batch_size: int | None
) -> int:
    """The draws per step of a gradient-descent run on one demonstration, its settings checked.

    Args:
        policy: The policy whose variant gives the default batch size.
        what: The run's name for the message (``"adaptation"``, ``"fine-tuning"``).
        steps: Adam steps.
        lr: Adam learning rate.
        grad_clip: Gradient-norm clip.
        batch_size: Draws per step; None: :func:`default_batch_size`.

    Raises:
        ConfigError: a setting is out of range.
    """
    batch = default_batch_size(policy) if batch_size is None else batch_size
    if steps < 1 or lr <= 0 or grad_clip <= 0 or batch < 1:
        raise ConfigError(
            f"bad {what} settings steps={steps}, lr={lr}, grad_clip={grad_clip}, "
            f"batch_size={batch}",
            fix="use steps >= 1, lr > 0, grad_clip > 0, batch_size >= 1",
        )
    return batch


def _denoising_steps(
    model: PDPModel,
    obs: torch.Tensor,
    act: torch.Tensor,
    z: torch.Tensor | None,
    opt: torch.optim.Optimizer,
    clipped: Sequence[torch.Tensor],
    *,
    steps: int,
    batch: int,
    grad_clip: float,
    gen: torch.Generator,
    after_step: Callable[[], None] | None = None,
) -> list[float]:
    """``steps`` optimiser steps on the denoising loss of windows drawn with replacement.

    Adaptation and fine-tuning must draw windows, noise and timesteps in the same order from
    ``gen`` so that, at equal seeds, they see the same data and differ only in what moves.

    Args:
        model: The PDP model whose denoising loss is minimised.
        obs: (N, ...) normalised observation windows.
        act: (N, ...) normalised action chunks.
        z: (z_dim,) latent used for every draw, or None for a policy without z.
        opt: The optimiser over what moves.
        clipped: The tensors whose gradient norm is clipped to ``grad_clip``.
        steps: Optimiser steps.
        batch: Windows x noise draws per step.
        grad_clip: Gradient-norm clip.
        gen: Generator of the window, noise and timestep draws.
        after_step: Called after each optimiser step (e.g. to project z back into bounds).

    Returns:
        The loss of each step.
    """
    history: list[float] = []
    for _ in range(steps):
        idx = torch.randint(0, len(obs), (batch,), generator=gen)
        zz = None if z is None else z[None].expand(batch, -1)
        loss = model.compute_loss(obs[idx], act[idx], zz, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(clipped, grad_clip)
        opt.step()
        if after_step is not None:
            after_step()
        history.append(loss.item())
    return history


def adapt_z_from_demonstration(
    policy: PDPPolicy,
    states: np.ndarray,
    actions: np.ndarray,
    *,
    steps: int = ADAPT_STEPS,
    lr: float = ADAPT_LR,
    grad_clip: float = 1.0,
    batch_size: int | None = None,
    z_init: ZInit | np.ndarray = "encoder",
    seed: int = 0,
    set_knob: bool = True,
) -> AdaptResult:
    """Fit z to one demonstration by minimising the denoising loss; weights stay frozen.

    The defaults are the reference method (``ftl_igm`` of Valarzz/pdp ``adapt.py``): z starts
    at the encoder's z of the demonstration, then ``steps`` Adam steps at ``lr`` with the
    gradient norm clipped to ``grad_clip``, each on ``batch_size`` noise/timestep draws. Only a
    fresh ``z`` tensor is given to the optimiser and every weight is detached from autograd for
    the duration (``requires_grad`` is restored afterwards), so the network is bitwise
    unchanged. z stays inside the knob bounds.

    Args:
        policy: A PDP (z_dim > 0).
        states: (T, state_dim) states of the demonstration.
        actions: (T, action_dim) actions of the demonstration.
        steps: Adam steps.
        lr: Adam learning rate.
        grad_clip: Gradient-norm clip on z.
        batch_size: Windows x noise draws per step (windows drawn with replacement); None:
            :func:`default_batch_size` (16 for ``reference``, as the reference's K).
        z_init: Start (knob space): ``"encoder"`` = the manifold encoder's z of this
            demonstration (the reference method), ``"zero"`` = the prior mean (ablation), or a
            value.
        seed: Seed of noise/timestep/window draws.
        set_knob: Set the policy's ``z`` knob to the result.

    Returns:
        The adapted z with the loss history and the start.
    """
    z_dim = _require_z(policy)
    batch = _step_batch(policy, "adaptation", steps, lr, grad_clip, batch_size)
    cfg = policy.config
    model = policy.model
    demonstration = _check_demonstration(policy, states, actions)
    obs, act = _windows(policy, demonstration)
    if isinstance(z_init, str):
        if z_init not in ("encoder", "zero"):
            raise ConfigError(
                f"unknown z_init {z_init!r}",
                fix="use z_init='encoder' (the reference), 'zero' (ablation) or a vector",
            )
        z0 = (
            encode_demonstration(policy, states, actions)
            if z_init == "encoder"
            else np.zeros(z_dim)
        )
    else:
        z0 = np.asarray(z_init, dtype=np.float64).reshape(-1)
        if z0.shape != (z_dim,):
            raise ConfigError(
                f"z_init has shape {z0.shape}, the policy's z has ({z_dim},)",
                fix=f"give {z_dim} numbers, 'encoder' or 'zero'",
            )
    bound = float(cfg.z_bound)
    z = torch.tensor(np.clip(z0, -bound, bound), dtype=torch.float32, requires_grad=True)
    opt = torch.optim.Adam([z], lr=lr)
    gen = torch.Generator().manual_seed(seed)
    params = list(model.parameters())
    flags = [p.requires_grad for p in params]

    def project() -> None:
        with torch.no_grad():
            z.clamp_(-bound, bound)

    model.eval()
    try:
        for p in params:
            p.requires_grad_(False)
        history = _denoising_steps(
            model,
            obs,
            act,
            z,
            opt,
            [z],
            steps=steps,
            batch=batch,
            grad_clip=grad_clip,
            gen=gen,
            after_step=project,
        )
    finally:
        for p, f in zip(params, flags, strict=True):
            p.requires_grad_(f)
    result = z.detach().numpy().astype(np.float64)
    if set_knob:
        policy.set_knob("z", result)
    return AdaptResult(result, history, steps, np.asarray(z0, dtype=np.float64))


def finetune_on_demonstration(
    policy: PDPPolicy,
    states: np.ndarray,
    actions: np.ndarray,
    *,
    steps: int = ADAPT_STEPS,
    lr: float = FINETUNE_LR,
    grad_clip: float = 1.0,
    batch_size: int | None = None,
    seed: int = 0,
) -> tuple[PDPPolicy, list[float]]:
    """Fine-tune a COPY of ``policy``'s denoiser on one demonstration (weights updated).

    The baseline with the information of one-demonstration adaptation: the plain diffusion
    policy (``z_dim=0``) gets the same demonstration, the same training windows of its
    variant (:func:`~policies.diffusion.processor_pdp.policy_windows`), the same number of
    gradient steps and draws per step as :func:`adapt_z_from_demonstration`, but moves its
    weights instead of z (Adam, denoising loss; a PDP is fine-tuned at its current knob z).
    ``policy`` itself is untouched.

    Args:
        policy: The policy to fine-tune (usually the plain DP).
        states: (T, state_dim) states of the demonstration.
        actions: (T, action_dim) actions of the demonstration.
        steps: Adam steps (use the adaptation's, for the same budget).
        lr: Adam learning rate.
        grad_clip: Gradient-norm clip on the denoiser's weights.
        batch_size: Windows x noise draws per step; None: :func:`default_batch_size`.
        seed: Seed of noise/timestep/window draws.

    Returns:
        The fine-tuned policy (a new :class:`PDPPolicy` with the same ``noise_seed`` and knob
        values) and the loss per step.
    """
    batch = _step_batch(policy, "fine-tuning", steps, lr, grad_clip, batch_size)
    demonstration = _check_demonstration(policy, states, actions)
    model = copy.deepcopy(policy.model)
    tuned = PDPPolicy(model, noise_seed=policy.noise_seed)
    z_value = policy.get_knob("z") if policy.config.uses_z else None
    if z_value is not None:
        tuned.set_knob("z", z_value)
    obs, act = _windows(tuned, demonstration)
    z = None if z_value is None else torch.as_tensor(z_value, dtype=torch.float32)
    params = [p for p in model.denoiser.parameters()]
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.Adam(params, lr=lr)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    try:
        history = _denoising_steps(
            model, obs, act, z, opt, params, steps=steps, batch=batch, grad_clip=grad_clip, gen=gen
        )
    finally:
        model.eval()
        for p in params:
            p.grad = None
    return tuned, history


def search_z_cem(
    cost: Callable[[np.ndarray], np.ndarray],
    z_dim: int,
    *,
    bound: float = 3.0,
    iterations: int = 4,
    population: int = 12,
    elites: int = 3,
    init_std: float = 1.0,
    min_std: float = 0.05,
    seed: int = 0,
) -> AdaptResult:
    """Cross-entropy method over z for a constraint-only objective (no demonstration).

    The project's extension: neither the paper nor the reference code searches z without a
    demonstration.

    Args:
        cost: ``cost(Z) -> costs`` for candidates Z (P, z_dim) (lower is better), e.g. the
            failure rate of sim rollouts in a shifted scene plus a small path-length term.
        z_dim: Latent size.
        bound: Candidates are clipped to ``[-bound, bound]``.
        iterations: CEM iterations.
        population: Candidates per iteration.
        elites: Candidates refitting the Gaussian.
        init_std: Initial std (the prior's).
        min_std: Floor on the std.
        seed: Sampling seed.

    Returns:
        The best candidate seen, with the best cost per iteration.
    """
    if not 1 <= elites <= population or iterations < 1 or z_dim < 1:
        raise ConfigError(
            f"bad CEM settings iterations={iterations}, population={population}, "
            f"elites={elites}, z_dim={z_dim}",
            fix="use iterations >= 1 and 1 <= elites <= population",
        )
    rng = np.random.default_rng(seed)
    mean, std = np.zeros(z_dim), np.full(z_dim, init_std)
    best_z, best_c = mean.copy(), np.inf
    history: list[float] = []
    evals = 0
    for _ in range(iterations):
        cand = np.clip(mean + std * rng.standard_normal((population, z_dim)), -bound, bound)
        costs = np.asarray(cost(cand), dtype=np.float64).reshape(-1)
        if costs.shape != (population,):
            raise ConfigError(
                f"CEM cost returned shape {costs.shape}, expected ({population},)",
                fix="return one cost per candidate row",
            )
        evals += population
        order = np.argsort(costs, kind="stable")
        if costs[order[0]] < best_c:
            best_c, best_z = float(costs[order[0]]), cand[order[0]].copy()
        elite = cand[order[:elites]]
        mean = elite.mean(0)
        std = np.maximum(elite.std(0), min_std)
        history.append(float(costs[order[0]]))
    return AdaptResult(best_z, history, evals)
