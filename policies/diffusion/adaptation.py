"""Test-time adaptation of PDP with no weight updates: only the behaviour latent z moves.

* :func:`adapt_z_from_demonstration` - ONE demonstration of a shifted scene; Adam on z
  minimises the denoising loss of that demonstration (paper: lr 3e-3, ~300 steps, grad clip 1).
* :func:`search_z_cem` - no demonstration, only a constraint: the cross-entropy method over z
  with a user cost (e.g. sim rollouts that must avoid a wall), evaluated in batches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from embodied.errors import ConfigError
from policies.diffusion.modeling_manifold import demonstration_tensors
from policies.diffusion.policy_pdp import PDPPolicy
from policies.diffusion.processor_pdp import Demonstrations, make_windows


@dataclass
class AdaptResult:
    """Outcome of an adaptation.

    Attributes:
        z: Adapted knob-space latent (z_dim,).
        history: Objective per step (denoising loss or CEM elite cost).
        evaluations: Number of objective evaluations (CEM: cost calls per candidate).
    """

    z: np.ndarray
    history: list[float] = field(default_factory=list)
    evaluations: int = 0


def _require_z(policy: PDPPolicy) -> int:
    if not policy.config.uses_z:
        raise ConfigError(
            "this policy has no behaviour latent (z_dim=0); nothing to adapt",
            fix="adapt a PDP trained with z_dim > 0",
        )
    return policy.config.z_dim


def encode_demonstration(policy: PDPPolicy, states: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """Knob-space z of one demonstration from the manifold encoder (amortised inference, no search).

    Args:
        policy: A PDP (z_dim > 0) whose checkpoint holds the manifold.
        states: (T, state_dim) states of the demonstration.
        actions: (T, action_dim) actions of the demonstration.

    Returns:
        (z_dim,) encoder mean mapped to knob space, clipped to the knob bounds.
    """
    _require_z(policy)
    model = policy.model
    assert model.manifold is not None
    norm = model.normalizer
    smin, smax = norm.state_min.numpy(), norm.state_max.numpy()
    scale = np.maximum((smax - smin) / 2.0, 1e-6)
    s, a = demonstration_tensors(
        [np.asarray(states, np.float64)],
        [np.asarray(actions, np.float64)],
        scale,
        norm.action_min.numpy().astype(np.float64),
        norm.action_max.numpy().astype(np.float64),
        policy.config.manifold.seq_len,
    )
    with torch.no_grad():
        mu, _ = model.manifold.encode(s, a)
        k = norm.latent_to_knob(mu)[0].numpy().astype(np.float64)
    b = policy.config.z_bound
    return np.clip(k, -b, b)


def adapt_z_from_demonstration(
    policy: PDPPolicy,
    states: np.ndarray,
    actions: np.ndarray,
    *,
    steps: int = 300,
    lr: float = 3e-3,
    grad_clip: float = 1.0,
    batch_size: int = 64,
    z_init: np.ndarray | str | None = None,
    seed: int = 0,
    set_knob: bool = True,
) -> AdaptResult:
    """Fit z to one demonstration by minimising the denoising loss; weights stay frozen.

    Only a fresh ``z`` tensor is given to the optimiser and every weight is detached from
    autograd for the duration (``requires_grad`` is restored afterwards), so the network
    is bitwise unchanged.

    Args:
        policy: A PDP (z_dim > 0).
        states: (T, state_dim) states of the demonstration.
        actions: (T, action_dim) actions of the demonstration.
        steps: Adam steps.
        lr: Adam learning rate.
        grad_clip: Gradient-norm clip on z.
        batch_size: Windows x noise draws per step (windows are sampled with replacement).
        z_init: Start (knob space): None = the prior mean 0 (the paper), ``"encoder"`` =
            the manifold encoder's guess for this demonstration (refined by the same loss), or
            a value.
        seed: Seed of noise/timestep/window draws.
        set_knob: Set the policy's ``z`` knob to the result.

    Returns:
        The adapted z with the loss history.
    """
    z_dim = _require_z(policy)
    if steps < 1 or lr <= 0 or grad_clip <= 0:
        raise ConfigError(
            f"bad adaptation settings steps={steps}, lr={lr}, grad_clip={grad_clip}",
            fix="use steps >= 1, lr > 0, grad_clip > 0",
        )
    cfg = policy.config
    model = policy.model
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
    obs_np, chunks_np, _ = make_windows(demonstration, cfg.n_obs_steps, cfg.horizon)
    with torch.no_grad():
        obs = model.encode_obs(torch.as_tensor(obs_np, dtype=torch.float32))
        act = model.normalizer.norm_action(torch.as_tensor(chunks_np, dtype=torch.float32))
    if isinstance(z_init, str):
        if z_init != "encoder":
            raise ConfigError(f"unknown z_init {z_init!r}", fix="use None, 'encoder' or a vector")
        z0 = encode_demonstration(policy, states, actions)
    else:
        z0 = np.zeros(z_dim) if z_init is None else np.asarray(z_init, dtype=np.float64)
    z = torch.tensor(z0, dtype=torch.float32, requires_grad=True)
    opt = torch.optim.Adam([z], lr=lr)
    gen = torch.Generator().manual_seed(seed)
    params = list(model.parameters())
    flags = [p.requires_grad for p in params]
    bound = float(cfg.z_bound)
    history: list[float] = []
    model.eval()
    try:
        for p in params:
            p.requires_grad_(False)
        for _ in range(steps):
            idx = torch.randint(0, len(obs), (batch_size,), generator=gen)
            loss = model.compute_loss(obs[idx], act[idx], z[None].expand(batch_size, -1), gen)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_([z], grad_clip)
            opt.step()
            with torch.no_grad():
                z.clamp_(-bound, bound)
            history.append(loss.item())
    finally:
        for p, f in zip(params, flags, strict=True):
            p.requires_grad_(f)
    result = z.detach().numpy().astype(np.float64)
    if set_knob:
        policy.set_knob("z", result)
    return AdaptResult(result, history, steps)


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
