"""The PDP evaluation on ``mujoco:reach_around`` (multimodal reach around obstacles).

Pipeline (``embodied pdp experiment``, :func:`run_experiment`): collect expert demonstrations
(random route and speed) -> train PDP and the same diffusion policy without z (``z_dim=0``) ->
evaluate (:func:`evaluate`):

* success on unshifted scenes (PDP with z from the prior, PDP at z=0, plain DP);
* mode coverage: route classes produced with z ~ N(0, I), and route control (z = the
  mean latent of each route's demonstrations -> fraction of rollouts taking that route);
* shifted scenes (passages closed by walls): plain DP vs PDP + one-demonstration adaptation
  vs PDP + constraint search (CEM over z with sim rollouts);
* plots: latent space coloured by route class, latent route map, trajectories along a
  linear interpolation in z.

Results go to ``results.json`` + ``results.md`` + PNGs in the output folder.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

import sim
from embodied.apps.experiments.pdp_plots import obstacle_boxes, plot_interpolation, plot_latents
from embodied.datasets import DatasetWriter
from embodied.io import write_json, write_text
from embodied.loop import rollout
from policies.diffusion.adaptation import (
    adapt_z_from_demonstration,
    encode_demonstration,
    search_z_cem,
)
from policies.diffusion.policy_pdp import PDPPolicy
from policies.diffusion.processor_pdp import Demonstrations
from policies.diffusion.training_pdp import _read_train_state, load_train_latents, train_pdp
from sim.mujoco import classify_route

ENV_ID = "mujoco:reach_around"
OBS_EXCLUDE = ("vel_x", "vel_y", "goal_x", "goal_y")
"""State dims the experiment's policies do not see: velocity (= the last action, a copycat
shortcut) and the absolute goal (redundant with position + goal offset)."""
SHIFT_METHODS: dict[str, str] = {
    "dp": "DP",
    "pdp_z0": "PDP z=0",
    "pdp_adapt_demonstration": "PDP + one-demonstration adaptation (paper: z from 0)",
    "pdp_encoder_demonstration": "PDP + encoder z of the demonstration",
    "pdp_adapt_demonstration_enc": "PDP + one-demonstration adaptation from encoder z",
    "pdp_constraint_cem": "PDP + constraint search (CEM)",
}
"""Shifted-scene methods (result key -> table header)."""
SHIFTED_SCENES = (
    "block_left",
    "block_center",
    "block_right",
    "block_left_center",
    "block_center_right",
    "block_left_right",
)


@dataclass(frozen=True)
class SeedOffsets:
    """Offsets from :func:`evaluate`'s first seed of each group of rollouts (env + noise seeds).

    They keep the groups' seeds disjoint, so no two groups replay the same episodes and none
    replays a training demonstration (demonstrations use seeds < 1000, the first evaluation
    seed is 1000): the unshifted evaluation uses ``[seed, seed + n_eval)``; each shifted scene
    ``i`` owns the block ``seed + shifted + i * scene_stride``, whose evaluation episodes start
    at the block, whose one adaptation demonstration starts at ``+ shifted_demonstration`` and
    whose CEM search rollouts start at ``+ cem_search``, so neither adaptation sees an episode
    it is scored on. The groups stay disjoint with at most 500 episodes per group and 9
    shifted scenes.
    """

    coverage: int = 5000
    """Mode-coverage rollouts (z ~ N(0, I))."""
    route_control: int = 7000
    """Route-control rollouts (z = a route's mean latent)."""
    shifted: int = 10000
    """First shifted scene's block."""
    scene_stride: int = 1000
    """Distance between two shifted scenes' blocks."""
    shifted_demonstration: int = 500
    """Within a scene's block: the expert demonstration of one-demonstration adaptation."""
    cem_search: int = 600
    """Within a scene's block: the CEM search rollouts."""
    latent_plot: int = 20000
    """Rollouts of the latent route-map plot."""
    interpolation_plot: int = 30000
    """Rollouts of the interpolation plot."""


SEED_OFFSETS = SeedOffsets()
"""The seed offsets of the experiment."""
CEM_STEP_COST = 1e-3
"""CEM cost per control step of a search rollout, added to its failure (0 or 1): among z that
succeed, prefer the faster ones; 120 steps (the horizon) cost less than one failure."""
LATENT_GRID_LIM = 2.5
"""The latent route-map plot rolls out z on a grid over ``[-lim, lim]^2`` (knob space)."""


@dataclass(frozen=True)
class PDPEvalConfig:
    """What :func:`evaluate` runs: episode counts, shifted scenes, search budgets, first seed.

    Args:
        n_eval: Unshifted evaluation episodes per method.
        n_shift_eval: Episodes per shifted scene and method.
        scenes: Shifted scenes of mujoco:reach_around (passages closed by walls).
        seed: First evaluation seed (training demonstrations use seeds < 1000 by default).
        n_coverage: Episodes with z ~ N(0, I) for mode coverage.
        n_control: Episodes per route for route control (z = the route's mean latent).
        adapt_steps: Adam steps of one-demonstration adaptation.
        cem_iterations: CEM iterations of the constraint search.
        cem_population: CEM candidates per iteration.
        cem_rollouts: Search rollouts per candidate (seeds disjoint from evaluation).
        plot_grid: Latent grid size (per axis) of the route-map plot.
        plots: Write PNG plots.
    """

    n_eval: int = 30
    n_shift_eval: int = 15
    scenes: tuple[str, ...] = SHIFTED_SCENES
    seed: int = 1000
    n_coverage: int = 45
    n_control: int = 15
    adapt_steps: int = 300
    cem_iterations: int = 3
    cem_population: int = 8
    cem_rollouts: int = 2
    plot_grid: int = 7
    plots: bool = True


@dataclass(frozen=True)
class PDPExperimentConfig:
    """What :func:`run_experiment` runs.

    Args:
        n_demonstrations: Expert demonstrations to collect.
        seeds: Training seeds (PDP and DP trained per seed).
        first_seed: First training seed (seeds first..first+n-1).
        steps: Diffusion training steps (None: PDPConfig's, 3000).
        overrides: Further PDPConfig overrides of both policies, e.g. ``{"manifold.steps": 300}``.
        evaluation: The evaluation of each training seed ``k``, whose first evaluation seed
            is ``evaluation.seed + 100000 * k``.
        progress: Show training progress bars.
    """

    n_demonstrations: int = 100
    seeds: int = 1
    first_seed: int = 0
    steps: int | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)
    evaluation: PDPEvalConfig = field(default_factory=PDPEvalConfig)
    progress: bool = True

    @property
    def train_seeds(self) -> tuple[int, ...]:
        """The training seeds ``first_seed .. first_seed + seeds - 1``."""
        return tuple(range(self.first_seed, self.first_seed + self.seeds))


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
) -> Demonstrations:
    """Roll out the scripted expert (random route/speed) for ``n`` successful demonstrations.

    Args:
        n: Successful demonstrations wanted.
        seed: First env seed (seeds ``seed, seed + 1, ...``).
        out_dir: Also write them as a dataset folder (robomimic shards) when given.
        scene: Scene of every episode.
        route: Force one route (None: random among open passages).
    """
    env = make_env()
    writer = DatasetWriter(out_dir, env_args=env.describe()) if out_dir is not None else None
    states: list[np.ndarray] = []
    actions: list[np.ndarray] = []
    labels: list[str] = []
    s = seed
    while len(states) < n:
        expert = env.unwrapped.expert(route=route, avoid_blocked=True)
        ep = rollout(env, expert, seed=s, reset_options={"scene": scene}, record_images=False)
        s += 1
        if not ep.success:
            continue
        ep.meta["route"] = expert.current_route
        ep.meta["speed_mps"] = expert.current_speed
        if writer is not None:
            writer.add(ep)
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
    """Roll out ``policy`` once per seed; ``z`` is one latent or one per seed."""
    rows = []
    for i, seed in enumerate(seeds):
        if z is not None:
            zi = z[i] if isinstance(z, Sequence) or np.ndim(z) == 2 else z
            policy.set_knob("z", np.clip(zi, -policy.config.z_bound, policy.config.z_bound))
        policy.noise_seed = int(seed)
        ep = rollout(
            env, policy, seed=int(seed), reset_options={"scene": scene}, record_images=False
        )
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


def success_rate(rows: Sequence[dict[str, Any]]) -> float:
    """Fraction of successful episodes."""
    return float(np.mean([r["success"] for r in rows])) if rows else float("nan")


def constraint_cost(
    env: Any, policy: Any, scene: str, seeds: Sequence[int]
) -> Callable[[np.ndarray], np.ndarray]:
    """The constraint-only CEM cost of a shifted scene (no demonstration, only sim rollouts).

    ``cost(Z)[k]`` is the mean over ``seeds`` of ``failure + CEM_STEP_COST * steps`` of
    ``policy`` run at ``Z[k]`` in ``scene`` (failure: a closed passage's wall hit or timeout).
    """

    def cost(cands: np.ndarray) -> np.ndarray:
        vals = []
        for zc in cands:
            rr = run_episodes(env, policy, seeds, scene, z=zc)
            vals.append(np.mean([1.0 - r["success"] + CEM_STEP_COST * r["steps"] for r in rr]))
        return np.asarray(vals)

    return cost


def latent_grid_rollouts(
    env: Any, policy: Any, seed: int, grid: int = 7, lim: float = LATENT_GRID_LIM
) -> tuple[list[np.ndarray], list[dict[str, Any]]]:
    """Roll out ``policy`` (seed ``seed``) at each z of a ``grid`` x ``grid`` grid over
    ``[-lim, lim]^2``; returns the z and the rows (for :func:`plot_latents`)."""
    vals = np.linspace(-lim, lim, grid)
    zs = [np.array([a, b]) for b in vals for a in vals]
    return zs, run_episodes(env, policy, [seed] * len(zs), z=zs)


def interpolation_rollouts(
    env: Any, policy: Any, centroids: Mapping[str, np.ndarray], seed: int, n: int = 7
) -> tuple[tuple[str, str], np.ndarray, list[dict[str, Any]]]:
    """Roll out ``policy`` (seed ``seed``) at ``n`` z linearly interpolated from the left to
    the right route latent (or the first two routes present).

    Returns:
        The two routes interpolated, the weights a and the rows (for
        :func:`plot_interpolation`).
    """
    keys = [k for k in ("left", "right") if k in centroids]
    if len(keys) < 2:
        keys = sorted(centroids)[:2]
    za, zb = centroids[keys[0]], centroids[keys[-1]]
    alphas = np.linspace(0.0, 1.0, n)
    zs = [(1 - a) * za + a * zb for a in alphas]
    return (keys[0], keys[-1]), alphas, run_episodes(env, policy, [seed] * n, z=zs)


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


def evaluate(
    pdp_dir: str | Path,
    dp_dir: str | Path,
    out_dir: str | Path,
    config: PDPEvalConfig | None = None,
) -> dict[str, Any]:
    """Evaluate a trained PDP against the plain DP and write results + plots.

    Args:
        pdp_dir: PDP checkpoint (``embodied train pdp``; its train state holds the latents).
        dp_dir: The same policy trained with ``--z-dim 0``.
        out_dir: Where ``results.json``, ``results.md`` and PNGs go.
        config: Episode counts, scenes, search budgets and the first seed.
    """
    cfg = config or PDPEvalConfig()
    t0 = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    env = make_env()
    pdp = PDPPolicy.from_pretrained(pdp_dir)
    dp = PDPPolicy.from_pretrained(dp_dir)
    latents, labels = load_train_latents(pdp_dir)
    centroids = route_centroids(latents, labels)
    rng = np.random.default_rng(cfg.seed)
    eval_seeds = list(range(cfg.seed, cfg.seed + cfg.n_eval))
    res: dict[str, Any] = {"env_id": ENV_ID, "pdp": str(pdp_dir), "dp": str(dp_dir)}

    # ---- unshifted success -----------------------------------------------------------------
    prior_z = [rng.standard_normal(pdp.config.z_dim) for _ in eval_seeds]
    rows = {
        "dp": run_episodes(env, dp, eval_seeds),
        "pdp_prior": run_episodes(env, pdp, eval_seeds, z=prior_z),
        "pdp_z0": run_episodes(env, pdp, eval_seeds, z=np.zeros(pdp.config.z_dim)),
    }
    res["unshifted"] = {
        k: {"success": success_rate(v), "n": len(v), "routes": dict(Counter(r["route"] for r in v))}
        for k, v in rows.items()
    }

    # ---- mode coverage and route control --------------------------------------------------
    off = SEED_OFFSETS
    cov_seeds = list(range(cfg.seed + off.coverage, cfg.seed + off.coverage + cfg.n_coverage))
    cov_z = [rng.standard_normal(pdp.config.z_dim) for _ in cov_seeds]
    cov_pdp = run_episodes(env, pdp, cov_seeds, z=cov_z)
    cov_dp = run_episodes(env, dp, cov_seeds)
    n_routes = 3
    res["coverage"] = {}
    for name, rr in (("pdp_prior", cov_pdp), ("dp", cov_dp)):
        ok = [r["route"] for r in rr if r["success"]]
        counts = Counter(ok)
        p = np.array([counts.get(k, 0) for k in ("left", "center", "right")], float)
        q = p[p > 0] / max(p.sum(), 1.0)
        ent = max(0.0, float(-(q * np.log(q)).sum()))
        res["coverage"][name] = {
            "classes_covered": int((p > 0).sum()),
            "coverage": float((p > 0).sum() / n_routes),
            "route_counts": dict(counts),
            "entropy_nats": ent,
            "n": len(rr),
            "success": success_rate(rr),
        }
    res["coverage"]["demonstrations"] = {"route_counts": dict(Counter(labels))}
    control = {}
    control_seeds = list(
        range(cfg.seed + off.route_control, cfg.seed + off.route_control + cfg.n_control)
    )
    for route, zc in centroids.items():
        rr = run_episodes(env, pdp, control_seeds, z=zc)
        control[route] = {
            "z": zc.tolist(),
            "route_match": float(np.mean([r["route"] == route for r in rr])),
            "success": success_rate(rr),
        }
    res["route_control"] = control

    # ---- shifted scenes -------------------------------------------------------------------------
    shifted: dict[str, Any] = {}
    for si, scene in enumerate(cfg.scenes):
        base = cfg.seed + off.shifted + off.scene_stride * si
        ev = list(range(base, base + cfg.n_shift_eval))
        entry: dict[str, Any] = {}
        entry["dp"] = success_rate(run_episodes(env, dp, ev, scene))
        entry["pdp_z0"] = success_rate(run_episodes(env, pdp, ev, scene, z=np.zeros(2)))
        # one demonstration of the shifted scene (expert through an open passage), adapt z only
        demonstration = collect_demonstrations(
            1, seed=base + off.shifted_demonstration, scene=scene
        )
        t_a = time.perf_counter()
        ad = adapt_z_from_demonstration(
            pdp, demonstration.states[0], demonstration.actions[0], steps=cfg.adapt_steps, seed=si
        )
        entry["adapt_seconds"] = time.perf_counter() - t_a
        entry["pdp_adapt_demonstration"] = success_rate(run_episodes(env, pdp, ev, scene, z=ad.z))
        entry["adapt_z"] = ad.z.tolist()
        entry["adapt_demonstration_route"] = demonstration.labels[0]
        # beyond the paper: the encoder's guess for the demonstration, alone and refined
        z_enc = encode_demonstration(pdp, demonstration.states[0], demonstration.actions[0])
        entry["pdp_encoder_demonstration"] = success_rate(
            run_episodes(env, pdp, ev, scene, z=z_enc)
        )
        ad_enc = adapt_z_from_demonstration(
            pdp,
            demonstration.states[0],
            demonstration.actions[0],
            steps=cfg.adapt_steps,
            seed=si,
            z_init=z_enc,
        )
        entry["pdp_adapt_demonstration_enc"] = success_rate(
            run_episodes(env, pdp, ev, scene, z=ad_enc.z)
        )
        entry["encoder_z"] = z_enc.tolist()
        entry["adapt_enc_z"] = ad_enc.z.tolist()
        # constraint only: CEM over z, cost = failure (wall hit / timeout) of search rollouts
        search_seeds = list(range(base + off.cem_search, base + off.cem_search + cfg.cem_rollouts))
        t_c = time.perf_counter()
        cem = search_z_cem(
            constraint_cost(env, pdp, scene, search_seeds),
            pdp.config.z_dim,
            bound=pdp.config.z_bound,
            iterations=cfg.cem_iterations,
            population=cfg.cem_population,
            elites=max(1, cfg.cem_population // 4),
            seed=si,
        )
        entry["cem_seconds"] = time.perf_counter() - t_c
        entry["cem_rollouts"] = cem.evaluations * cfg.cem_rollouts
        entry["pdp_constraint_cem"] = success_rate(run_episodes(env, pdp, ev, scene, z=cem.z))
        entry["cem_z"] = cem.z.tolist()
        shifted[scene] = entry
    res["shifted"] = shifted
    res["seconds"] = time.perf_counter() - t0
    if cfg.plots:
        grid_seed = cfg.seed + off.latent_plot
        grid_z, grid_rows = latent_grid_rollouts(env, pdp, grid_seed, grid=cfg.plot_grid)
        res["plots"] = {
            "latents": str(
                plot_latents(
                    out / "latent_space.png", latents, labels, grid_z, grid_rows, seed=grid_seed
                )
            ),
            "interpolation": str(
                write_interpolation_plot(
                    out / "interpolation.png",
                    env,
                    pdp,
                    centroids,
                    cfg.seed + off.interpolation_plot,
                )
            ),
        }
    write_json(out / "results.json", res)
    write_text(out / "results.md", results_markdown(res))
    return res


def results_markdown(res: dict[str, Any]) -> str:
    """The results as markdown tables."""
    pct = lambda x: f"{100 * x:.0f}%"  # noqa: E731
    u = res["unshifted"]
    lines = [
        f"# PDP on `{res['env_id']}`",
        "",
        "## Unshifted scenes",
        "",
        "| method | success | routes |",
        "|---|---|---|",
    ]
    names = {"dp": "DP (no z)", "pdp_prior": "PDP, z ~ N(0, I)", "pdp_z0": "PDP, z = 0"}
    for k, label in names.items():
        lines.append(f"| {label} | {pct(u[k]['success'])} (n={u[k]['n']}) | {u[k]['routes']} |")
    c = res["coverage"]
    lines += [
        "",
        "## Mode coverage (successful episodes' route classes)",
        "",
        "| method | classes covered | entropy (nats, max 1.10) | counts |",
        "|---|---|---|---|",
    ]
    for k, label in (("pdp_prior", "PDP, z ~ N(0, I)"), ("dp", "DP (noise only)")):
        lines.append(
            f"| {label} | {c[k]['classes_covered']}/3 | {c[k]['entropy_nats']:.2f} | "
            f"{c[k]['route_counts']} |"
        )
    lines += [
        "",
        f"Demonstrations: {c['demonstrations']['route_counts']}",
        "",
        "## Route control (z = mean latent of a route's demonstrations)",
        "",
        "| route | rollouts taking it | success |",
        "|---|---|---|",
    ]
    for r, v in res["route_control"].items():
        lines.append(f"| {r} | {pct(v['route_match'])} | {pct(v['success'])} |")
    lines += [
        "",
        "## Shifted scenes (success)",
        "",
        "| scene | " + " | ".join(SHIFT_METHODS.values()) + " |",
        "|---|" + "---|" * len(SHIFT_METHODS),
    ]
    means: dict[str, list[float]] = {k: [] for k in SHIFT_METHODS}
    for scene, v in res["shifted"].items():
        lines.append(f"| {scene} | " + " | ".join(pct(v[k]) for k in SHIFT_METHODS) + " |")
        for k in means:
            means[k].append(v[k])
    if res["shifted"]:
        lines.append(
            "| **mean** | "
            + " | ".join(f"**{pct(float(np.mean(means[k])))}**" for k in means)
            + " |"
        )
    lines += ["", f"Evaluation wall time: {res['seconds']:.0f} s.", ""]
    return "\n".join(lines)


def aggregate(per_seed: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean and std over training seeds of the headline numbers."""

    def stat(values: list[float]) -> dict[str, float]:
        return {"mean": float(np.mean(values)), "std": float(np.std(values)), "n": len(values)}

    out: dict[str, Any] = {"unshifted": {}, "coverage": {}, "route_control": {}, "shifted": {}}
    for k in per_seed[0]["unshifted"]:
        out["unshifted"][k] = stat([r["unshifted"][k]["success"] for r in per_seed])
    for k in ("pdp_prior", "dp"):
        out["coverage"][k] = stat([r["coverage"][k]["coverage"] for r in per_seed])
        out["coverage"][k + "_entropy"] = stat([r["coverage"][k]["entropy_nats"] for r in per_seed])
    for route in per_seed[0]["route_control"]:
        out["route_control"][route] = stat(
            [
                r["route_control"][route]["route_match"]
                for r in per_seed
                if route in r["route_control"]
            ]
        )
    methods = tuple(SHIFT_METHODS)
    for scene in per_seed[0]["shifted"]:
        out["shifted"][scene] = {
            m: stat([r["shifted"][scene][m] for r in per_seed]) for m in methods
        }
    if per_seed[0]["shifted"]:
        out["shifted"]["mean"] = {
            m: stat([float(np.mean([v[m] for v in r["shifted"].values()])) for r in per_seed])
            for m in methods
        }
    return out


def aggregate_markdown(agg: dict[str, Any], n_seeds: int) -> str:
    """Markdown of :func:`aggregate` (mean +- std over training seeds)."""
    f = lambda s: f"{100 * s['mean']:.0f} ± {100 * s['std']:.0f}%"  # noqa: E731
    lines = [
        f"# PDP on `{ENV_ID}`: mean ± std over {n_seeds} training seed(s)",
        "",
        "| unshifted success | " + " | ".join(agg["unshifted"]) + " |",
        "|---|" + "---|" * len(agg["unshifted"]),
        "| | " + " | ".join(f(v) for v in agg["unshifted"].values()) + " |",
        "",
        "| mode coverage (of 3 routes) | PDP z ~ N(0, I) | DP (noise only) |",
        "|---|---|---|",
        f"| classes covered | {f(agg['coverage']['pdp_prior'])} | {f(agg['coverage']['dp'])} |",
        "",
        "| route control: z = route's mean latent | " + " | ".join(agg["route_control"]) + " |",
        "|---|" + "---|" * len(agg["route_control"]),
        "| rollouts taking that route | "
        + " | ".join(f(v) for v in agg["route_control"].values())
        + " |",
        "",
        "| shifted scene | " + " | ".join(SHIFT_METHODS.values()) + " |",
        "|---|" + "---|" * len(SHIFT_METHODS),
    ]
    for scene, v in agg["shifted"].items():
        lines.append(f"| {scene} | " + " | ".join(f(v[m]) for m in SHIFT_METHODS) + " |")
    return "\n".join(lines) + "\n"


def run_experiment(
    out_dir: str | Path, config: PDPExperimentConfig | None = None
) -> dict[str, Any]:
    """Collect demonstrations, train PDP and DP per training seed, evaluate, aggregate.

    Writes ``OUT/demonstrations`` (dataset), ``OUT/seed<k>/{pdp,dp,eval}`` and
    ``OUT/results.json`` + ``OUT/results.md`` (mean ± std over seeds). Existing checkpoints
    are reused.
    """
    cfg = config or PDPExperimentConfig()
    out = Path(out_dir)
    data_dir = out / "demonstrations"
    if not (data_dir / "meta.json").exists():
        collect_demonstrations(cfg.n_demonstrations, seed=0, out_dir=data_dir)
    overrides = {**cfg.overrides, **({"steps": cfg.steps} if cfg.steps else {})}
    per_seed = []
    for s in cfg.train_seeds:
        root = out / f"seed{s}"
        for name, z_dim in (("pdp", 2), ("dp", 0)):
            if not (root / name / "config.json").exists() or _unfinished(root / name):
                resume = (root / name / "train_state.json").exists()
                train_pdp(
                    data_dir,
                    root / name,
                    None,
                    overrides={
                        "obs_exclude": list(OBS_EXCLUDE),
                        **overrides,
                        "z_dim": z_dim,
                        "seed": s,
                    },
                    resume=resume,
                    progress=cfg.progress,
                )
        evaluation = replace(cfg.evaluation, seed=cfg.evaluation.seed + 100000 * s)
        res = evaluate(root / "pdp", root / "dp", root / "eval", evaluation)
        per_seed.append(res)
    summary: dict[str, Any] = {
        "per_seed": per_seed,
        "aggregate": aggregate(per_seed),
        "train_seeds": list(cfg.train_seeds),
        "n_demonstrations": cfg.n_demonstrations,
    }
    write_json(out / "results.json", summary)
    write_text(
        out / "results.md",
        aggregate_markdown(summary["aggregate"], len(per_seed))
        + "\n"
        + "\n".join(results_markdown(r) for r in per_seed),
    )
    return summary


def _unfinished(ckpt: Path) -> bool:
    if not (ckpt / "train_state.json").exists():
        return True
    data = _read_train_state(ckpt)
    steps = data["config"].get("steps")
    return not isinstance(steps, int) or data["step"] < steps


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
        overrides={"steps": 3000, "seed": seed, "obs_exclude": list(OBS_EXCLUDE)},
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
