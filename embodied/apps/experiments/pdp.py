"""The PDP evaluation on ``mujoco:reach_around`` (multimodal reach around obstacles).

Pipeline (``embodied pdp experiment``): collect expert demos (random route and speed) ->
train PDP and the same diffusion policy without z (``z_dim=0``) -> evaluate:

* success on unshifted scenes (PDP with z from the prior, PDP at z=0, plain DP);
* mode coverage: route classes produced with z ~ N(0, I), and route control (z = the
  mean latent of each route's demos -> fraction of rollouts taking that route);
* shifted scenes (passages closed by walls): plain DP vs PDP + one-demo adaptation vs
  PDP + constraint search (CEM over z with sim rollouts);
* plots: latent space coloured by route class, latent route map, trajectories along a
  linear interpolation in z.

Results go to ``results.json`` + ``results.md`` + PNGs in the output folder.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from embodied.io import write_json, write_text
from policies.diffusion.processing_pdp import Demos

ENV_ID = "mujoco:reach_around"
OBS_EXCLUDE = ("vel_x", "vel_y", "goal_x", "goal_y")
"""State dims the experiment's policies do not see: velocity (= the last action, a copycat
shortcut) and the absolute goal (redundant with position + goal offset)."""
SHIFT_METHODS: dict[str, str] = {
    "dp": "DP",
    "pdp_z0": "PDP z=0",
    "pdp_adapt_demo": "PDP + one-demo adaptation (paper: z from 0)",
    "pdp_encoder_demo": "PDP + encoder z of the demo",
    "pdp_adapt_demo_enc": "PDP + one-demo adaptation from encoder z",
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


def make_env(terminate_on_block: bool = True) -> Any:
    """The reach_around env (episodes end when a closed passage's wall is hit)."""
    import sim

    return sim.make(ENV_ID, terminate_on_block=terminate_on_block)


def route_of(states: np.ndarray) -> str:
    """Route class of a state trajectory (x, y are the first two state dims)."""
    from sim.mujoco import classify_route

    return str(classify_route(np.asarray(states)[:, :2]))


def collect_demos(
    n: int,
    seed: int = 0,
    out_dir: str | Path | None = None,
    scene: str = "default",
    route: str | None = None,
) -> Demos:
    """Roll out the scripted expert (random route/speed) for ``n`` successful demos.

    Args:
        n: Successful demos wanted.
        seed: First env seed (seeds ``seed, seed + 1, ...``).
        out_dir: Also write them as a dataset folder (robomimic shards) when given.
        scene: Scene of every episode.
        route: Force one route (None: random among open passages).
    """
    from embodied.datasets import DatasetWriter
    from embodied.loop import rollout

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
    return Demos(states, actions, labels, env.describe())


def run_episodes(
    env: Any,
    policy: Any,
    seeds: Sequence[int],
    scene: str = "default",
    z: np.ndarray | Sequence[np.ndarray] | Sequence[float] | None = None,
) -> list[dict[str, Any]]:
    """Roll out ``policy`` once per seed; ``z`` is one latent or one per seed."""
    from embodied.loop import rollout

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


def route_centroids(latents: np.ndarray, labels: Sequence[str]) -> dict[str, np.ndarray]:
    """Mean knob-space latent of each route's demos."""
    out = {}
    for r in sorted(set(labels)):
        mask = np.asarray(labels) == r
        out[r] = latents[mask].mean(0)
    return out


def evaluate(
    pdp_dir: str | Path,
    dp_dir: str | Path,
    out_dir: str | Path,
    *,
    n_eval: int = 30,
    n_coverage: int = 45,
    scenes: Sequence[str] = SHIFTED_SCENES,
    n_shift_eval: int = 15,
    cem_iterations: int = 3,
    cem_population: int = 8,
    cem_rollouts: int = 2,
    adapt_steps: int = 300,
    n_control: int = 15,
    plot_grid: int = 7,
    seed: int = 1000,
    plots: bool = True,
) -> dict[str, Any]:
    """Evaluate a trained PDP against the plain DP and write results + plots.

    Args:
        pdp_dir: PDP checkpoint (``embodied train pdp``; its train state holds the latents).
        dp_dir: The same policy trained with ``--z-dim 0``.
        out_dir: Where ``results.json``, ``results.md`` and PNGs go.
        n_eval: Unshifted evaluation episodes per method.
        n_coverage: Episodes with z ~ N(0, I) for mode coverage.
        scenes: Shifted scenes evaluated.
        n_shift_eval: Evaluation episodes per shifted scene and method.
        n_control: Episodes per route for route control (z = the route's mean latent).
        plot_grid: Latent grid size (per axis) of the route-map plot.
        cem_iterations: CEM iterations of the constraint search.
        cem_population: CEM candidates per iteration.
        cem_rollouts: Search rollouts per candidate (seeds disjoint from evaluation).
        adapt_steps: Adam steps of one-demo adaptation.
        seed: First evaluation seed (training demos use seeds < 1000 by default).
        plots: Write PNG plots.
    """
    from policies.diffusion.adaptation import adapt_z_from_demo, encode_demo, search_z_cem
    from policies.diffusion.policy_pdp import PDPPolicy
    from policies.diffusion.training import load_train_latents

    t0 = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    env = make_env()
    pdp = PDPPolicy.from_pretrained(pdp_dir)
    dp = PDPPolicy.from_pretrained(dp_dir)
    latents, labels = load_train_latents(pdp_dir)
    centroids = route_centroids(latents, labels)
    rng = np.random.default_rng(seed)
    eval_seeds = list(range(seed, seed + n_eval))
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
    cov_seeds = list(range(seed + 5000, seed + 5000 + n_coverage))
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
    demo_counts = Counter(labels)
    res["coverage"]["demos"] = {"route_counts": dict(demo_counts)}
    control = {}
    for route, zc in centroids.items():
        rr = run_episodes(env, pdp, list(range(seed + 7000, seed + 7000 + n_control)), z=zc)
        control[route] = {
            "z": zc.tolist(),
            "route_match": float(np.mean([r["route"] == route for r in rr])),
            "success": success_rate(rr),
        }
    res["route_control"] = control

    # ---- shifted scenes --------------------------------------------------------------------
    shifted: dict[str, Any] = {}
    for si, scene in enumerate(scenes):
        base = seed + 10000 + 1000 * si
        ev = list(range(base, base + n_shift_eval))
        entry: dict[str, Any] = {}
        entry["dp"] = success_rate(run_episodes(env, dp, ev, scene))
        entry["pdp_z0"] = success_rate(run_episodes(env, pdp, ev, scene, z=np.zeros(2)))
        # one demo of the shifted scene (expert through an open passage), adapt z only
        demo = collect_demos(1, seed=base + 500, scene=scene)
        t_a = time.perf_counter()
        ad = adapt_z_from_demo(pdp, demo.states[0], demo.actions[0], steps=adapt_steps, seed=si)
        entry["adapt_seconds"] = time.perf_counter() - t_a
        entry["pdp_adapt_demo"] = success_rate(run_episodes(env, pdp, ev, scene, z=ad.z))
        entry["adapt_z"] = ad.z.tolist()
        entry["adapt_demo_route"] = demo.labels[0]
        # beyond the paper: the encoder's guess for the demo, alone and refined
        z_enc = encode_demo(pdp, demo.states[0], demo.actions[0])
        entry["pdp_encoder_demo"] = success_rate(run_episodes(env, pdp, ev, scene, z=z_enc))
        ad_enc = adapt_z_from_demo(
            pdp, demo.states[0], demo.actions[0], steps=adapt_steps, seed=si, z_init=z_enc
        )
        entry["pdp_adapt_demo_enc"] = success_rate(run_episodes(env, pdp, ev, scene, z=ad_enc.z))
        entry["encoder_z"] = z_enc.tolist()
        entry["adapt_enc_z"] = ad_enc.z.tolist()
        # constraint only: CEM over z, cost = failure (wall hit / timeout) of search rollouts
        search_seeds = list(range(base + 600, base + 600 + cem_rollouts))

        def cost(
            cands: np.ndarray, _scene: str = scene, _seeds: list[int] = search_seeds
        ) -> np.ndarray:
            vals = []
            for zc in cands:
                rr = run_episodes(env, pdp, _seeds, _scene, z=zc)
                vals.append(np.mean([1.0 - r["success"] + 1e-3 * r["steps"] for r in rr]))
            return np.asarray(vals)

        t_c = time.perf_counter()
        cem = search_z_cem(
            cost,
            pdp.config.z_dim,
            bound=pdp.config.z_bound,
            iterations=cem_iterations,
            population=cem_population,
            elites=max(1, cem_population // 4),
            seed=si,
        )
        entry["cem_seconds"] = time.perf_counter() - t_c
        entry["cem_rollouts"] = cem.evaluations * cem_rollouts
        entry["pdp_constraint_cem"] = success_rate(run_episodes(env, pdp, ev, scene, z=cem.z))
        entry["cem_z"] = cem.z.tolist()
        shifted[scene] = entry
    res["shifted"] = shifted
    res["seconds"] = time.perf_counter() - t0
    if plots:
        from embodied.apps.experiments.pdp_plots import plot_interpolation, plot_latents

        res["plots"] = {
            "latents": str(
                plot_latents(
                    out / "latent_space.png",
                    latents,
                    labels,
                    pdp,
                    env,
                    seed=seed + 20000,
                    grid=plot_grid,
                )
            ),
            "interpolation": str(
                plot_interpolation(
                    out / "interpolation.png", pdp, env, centroids, seed=seed + 30000
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
        f"Demos: {c['demos']['route_counts']}",
        "",
        "## Route control (z = mean latent of a route's demos)",
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
    out_dir: str | Path,
    *,
    n_demos: int = 100,
    train_seeds: Sequence[int] = (0,),
    overrides: dict[str, Any] | None = None,
    progress: bool = True,
    **eval_kw: Any,
) -> dict[str, Any]:
    """Collect demos, train PDP and DP per training seed, evaluate, aggregate.

    Writes ``OUT/demos`` (dataset), ``OUT/seed<k>/{pdp,dp,eval}`` and ``OUT/results.json`` +
    ``OUT/results.md`` (mean ± std over seeds). Existing checkpoints are reused.
    """
    from policies.diffusion.training import train_pdp

    out = Path(out_dir)
    demo_dir = out / "demos"
    if not (demo_dir / "meta.json").exists():
        collect_demos(n_demos, seed=0, out_dir=demo_dir)
    per_seed = []
    for s in train_seeds:
        root = out / f"seed{s}"
        for name, z_dim in (("pdp", 2), ("dp", 0)):
            if not (root / name / "config.json").exists() or _unfinished(root / name):
                resume = (root / name / "train_state.json").exists()
                train_pdp(
                    demo_dir,
                    root / name,
                    None,
                    overrides={
                        "obs_exclude": list(OBS_EXCLUDE),
                        **(overrides or {}),
                        "z_dim": z_dim,
                        "seed": s,
                    },
                    resume=resume,
                    progress=progress,
                )
        res = evaluate(root / "pdp", root / "dp", root / "eval", seed=1000 + 100000 * s, **eval_kw)
        per_seed.append(res)
    summary: dict[str, Any] = {
        "per_seed": per_seed,
        "aggregate": aggregate(per_seed),
        "train_seeds": list(train_seeds),
        "n_demos": n_demos,
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
    from policies.diffusion.training import _read_train_state

    if not (ckpt / "train_state.json").exists():
        return True
    data = _read_train_state(ckpt)
    steps = data["config"].get("steps")
    return not isinstance(steps, int) or data["step"] < steps


def quick_demo(
    out_dir: str | Path, budget_s: float = 90.0, n_demos: int = 60, seed: int = 0
) -> dict[str, Any]:
    """Train a small PDP within ``budget_s`` and roll it out once per route latent.

    For ``embodied demo``: collects expert demos, trains (time-boxed), then runs the policy
    with z set to each route's mean latent and writes ``interpolation.png``.

    Returns:
        Metrics: checkpoint path, training steps/seconds/loss, per-route rollout outcome,
        success rate and the plot path.
    """
    from policies.diffusion.policy_pdp import PDPPolicy
    from policies.diffusion.training import train_pdp

    t0 = time.perf_counter()
    out = Path(out_dir)
    demos = collect_demos(n_demos, seed=seed, out_dir=out / "demos")
    train_budget = max(10.0, 0.75 * budget_s - (time.perf_counter() - t0))
    result = train_pdp(
        demos,
        out / "pdp",
        None,
        overrides={"steps": 3000, "seed": seed, "obs_exclude": list(OBS_EXCLUDE)},
        progress=False,
        budget_s=train_budget,
        checkpoint_every=250,
    )
    policy = PDPPolicy.from_pretrained(out / "pdp")
    centroids = route_centroids(result.demo_latents, result.labels)
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
    from embodied.apps.experiments.pdp_plots import plot_interpolation

    plot = plot_interpolation(out / "interpolation.png", policy, env, centroids, seed=seed + 777)
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
