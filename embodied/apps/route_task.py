"""The built-in route-choice task for diffusion policies: ``mujoco:reach_around``.

The scripted expert reaches the goal around the obstacles through one of three passages
(routes ``left``, ``center``, ``right``): a multimodal task on which a Parameterized Diffusion
Policy's latent z picks the route. This module collects its expert demonstrations
(:func:`collect_demonstrations`), rolls a policy out as ``embodied eval`` does
(:func:`run_episodes`), and runs the PDP section of ``embodied demo`` (:func:`quick_demo`: a
time-boxed PDP, rolled out at each route's latent). The lab's PDP evaluation
(:mod:`embodied.apps.lab.pdp`) builds on the same functions.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import sim
from embodied.apps.plotting import obstacle_boxes, plot_interpolation
from embodied.datasets import DatasetWriter
from embodied.errors import ConfigError
from embodied.loop import rollout
from policies.diffusion.policy_pdp import PDPPolicy
from policies.diffusion.processor_pdp import Demonstrations
from policies.diffusion.training_pdp import train_pdp
from sim.mujoco import classify_route

ENV_ID = "mujoco:reach_around"
OBS_EXCLUDE = ("vel_x", "vel_y", "goal_x", "goal_y")
"""State dims the experiment's policies do not see: velocity (= the last action, a copycat
shortcut) and the absolute goal (redundant with position + goal offset)."""


def make_env(terminate_on_block: bool = True) -> Any:
    """The reach_around env (episodes end when a closed passage's wall is hit)."""
    return sim.make(ENV_ID, terminate_on_block=terminate_on_block)


def route_of(states: np.ndarray) -> str:
    """Route class of a state trajectory (x, y are the first two state dims)."""
    return str(classify_route(np.asarray(states)[:, :2]))


def collect_demonstrations(
    n: int,
    seed: int = 0,
    out_dir: str | Path | None = None,
    scene: str = "default",
    route: str | None = None,
    *,
    max_seeds: int | None = None,
    seeds_used: list[int] | None = None,
) -> Demonstrations:
    """Roll out the scripted expert (random route/speed) for ``n`` successful demonstrations.

    Args:
        n: Successful demonstrations wanted.
        seed: First env seed (seeds ``seed, seed + 1, ...``).
        out_dir: Also write them as a dataset folder (robomimic shards) when given.
        scene: Scene of every episode.
        route: Force one route (None: random among open passages).
        max_seeds: Try at most this many seeds (None: no limit).
        seeds_used: Appended with the seed of each kept demonstration.

    Raises:
        ConfigError: ``max_seeds`` seeds gave fewer than ``n`` successful demonstrations.
    """
    env = make_env()
    writer = DatasetWriter(out_dir, env_args=env.describe()) if out_dir is not None else None
    states: list[np.ndarray] = []
    actions: list[np.ndarray] = []
    labels: list[str] = []
    s = seed
    while len(states) < n:
        if max_seeds is not None and s - seed >= max_seeds:
            raise ConfigError(
                f"the expert succeeded {len(states)} times in {max_seeds} seeds from {seed} "
                f"(scene {scene!r}, route {route!r}), {n} demonstrations wanted",
                fix="raise max_seeds (SeedOffsets.demonstration_tries) or check the scene",
            )
        expert = env.unwrapped.expert(route=route, avoid_blocked=True)
        ep = rollout(env, expert, seed=s, reset_options={"scene": scene}, record_images=False)
        s += 1
        if not ep.success:
            continue
        ep.meta["route"] = expert.current_route
        ep.meta["speed_mps"] = expert.current_speed
        if writer is not None:
            writer.add(ep)
        if seeds_used is not None:
            seeds_used.append(s - 1)
        states.append(ep.observations["state"].astype(np.float64))
        actions.append(ep.actions)
        labels.append(expert.current_route)
    return Demonstrations(states, actions, labels, env.describe())


def run_episodes(
    env: Any,
    policy: Any,
    seeds: Sequence[int],
    scene: str = "default",
    z: np.ndarray | Sequence[np.ndarray] | Sequence[float] | None = None,
) -> list[dict[str, Any]]:
    """Roll out ``policy`` once per seed, exactly as ``embodied eval`` rolls out an episode.

    Each episode is ``embodied.loop.rollout(env, policy, seed=seed)`` (the rollout seeds the
    policy's sampling noise from ``(policy.noise_seed, seed)``); the default scene passes no
    reset options, as ``embodied eval`` does. ``z`` is one latent or one per seed (clipped to
    the knob bounds).
    """
    rows = []
    options = None if scene == "default" else {"scene": scene}
    for i, seed in enumerate(seeds):
        if z is not None:
            zi = z[i] if isinstance(z, Sequence) or np.ndim(z) == 2 else z
            policy.set_knob("z", np.clip(zi, -policy.config.z_bound, policy.config.z_bound))
        ep = rollout(env, policy, seed=int(seed), reset_options=options, record_images=False)
        rows.append(
            {
                "seed": int(seed),
                "success": bool(ep.success),
                "steps": len(ep),
                "route": route_of(ep.observations["state"]),
                "blocked": bool(ep.final_info.get("blocked", False)),
                "path": ep.observations["state"][:, :2].copy(),
            }
        )
    return rows


def interpolation_ends(centroids: Mapping[str, np.ndarray]) -> tuple[str, str]:
    """The two route latents interpolated: left and right, else the first two routes."""
    keys = [k for k in ("left", "right") if k in centroids]
    if len(keys) < 2:
        keys = sorted(centroids)[:2]
    return keys[0], keys[-1]


def interpolation_rollouts(
    env: Any, policy: Any, centroids: Mapping[str, np.ndarray], seed: int, n: int = 7
) -> tuple[tuple[str, str], np.ndarray, list[dict[str, Any]]]:
    """Roll out ``policy`` (seed ``seed``) at ``n`` z linearly interpolated from the left to
    the right route latent (or the first two routes present).

    Returns:
        The two routes interpolated, the weights a and the rows (for
        :func:`plot_interpolation`).
    """
    a, b = interpolation_ends(centroids)
    alphas = np.linspace(0.0, 1.0, n)
    zs = [(1 - w) * centroids[a] + w * centroids[b] for w in alphas]
    return (a, b), alphas, run_episodes(env, policy, [seed] * n, z=zs)


def write_interpolation_plot(
    path: str | Path, env: Any, policy: Any, centroids: Mapping[str, np.ndarray], seed: int
) -> Path:
    """Roll out the z interpolation and plot it over the obstacles of ``env``'s model."""
    ends, alphas, rows = interpolation_rollouts(env, policy, centroids, seed)
    return plot_interpolation(path, alphas, rows, ends, obstacle_boxes(env.unwrapped.model))


def route_centroids(latents: np.ndarray, labels: Sequence[str]) -> dict[str, np.ndarray]:
    """Mean knob-space latent of each route's demonstrations."""
    out = {}
    for r in sorted(set(labels)):
        mask = np.asarray(labels) == r
        out[r] = latents[mask].mean(0)
    return out


def quick_demo(
    out_dir: str | Path, budget_s: float = 90.0, n_demonstrations: int = 60, seed: int = 0
) -> dict[str, Any]:
    """Train a small PDP within ``budget_s`` and roll it out once per route latent.

    For ``embodied demo``: collects expert demonstrations, trains (time-boxed), then runs the
    policy with z set to each route's mean latent and writes ``interpolation.png``.

    Returns:
        Metrics: checkpoint path, training steps/seconds/loss, per-route rollout outcome,
        success rate and the plot path.
    """
    t0 = time.perf_counter()
    out = Path(out_dir)
    demonstrations = collect_demonstrations(
        n_demonstrations, seed=seed, out_dir=out / "demonstrations"
    )
    train_budget = max(10.0, 0.75 * budget_s - (time.perf_counter() - t0))
    result = train_pdp(
        demonstrations,
        out / "pdp",
        None,
        overrides={  # time-boxed: the earlier, smaller denoiser gets more steps into the box
            "steps": 3000,
            "hidden_dim": 128,
            "cond_dim": 64,
            "num_inference_steps": 8,
            "seed": seed,
            "obs_exclude": list(OBS_EXCLUDE),
        },
        progress=False,
        budget_s=train_budget,
        checkpoint_every=250,
    )
    policy = PDPPolicy.from_pretrained(out / "pdp")
    centroids = route_centroids(result.demonstration_latents, result.labels)
    env = make_env()
    routes = {}
    for route, z in centroids.items():
        row = run_episodes(env, policy, [seed + 777], z=z)[0]
        routes[route] = {
            "z": z.tolist(),
            "route_taken": row["route"],
            "success": row["success"],
            "steps": row["steps"],
        }
    rng = np.random.default_rng(seed)
    prior = []
    for i in range(3):  # z sampled from the manifold's prior
        z = rng.standard_normal(policy.config.z_dim)
        row = run_episodes(env, policy, [seed + 900 + i], z=z)[0]
        prior.append({"z": z.tolist(), "route_taken": row["route"], "success": row["success"]})
    plot = write_interpolation_plot(out / "interpolation.png", env, policy, centroids, seed + 777)
    return {
        "checkpoint": str(out / "pdp"),
        "train_steps": result.steps,
        "train_seconds": round(result.seconds, 1),
        "final_loss": result.final_loss,
        "routes": routes,
        "prior_samples": prior,
        "success_rate": float(np.mean([r["success"] for r in routes.values()])),
        "route_match": float(np.mean([r["route_taken"] == k for k, r in routes.items()])),
        "plot": str(plot),
        "seconds": round(time.perf_counter() - t0, 1),
    }
