"""The PDP evaluation on ``mujoco:reach_around`` (multimodal reach around obstacles).

Pipeline (``embodied lab pdp experiment``, :func:`run_experiment`): collect expert demonstrations
(random route and speed) -> per policy variant (:data:`MODES`: ``reference``, the reference
code's open-loop whole-trajectory PDP, and ``receding``, the project's receding-horizon
extension) and per training seed, train PDP and the same diffusion policy without z
(``z_dim=0``, "DP") -> evaluate each pair (:func:`evaluate`) -> aggregate over training seeds
(:func:`aggregate`):

* unshifted scene: DP, PDP with z from the prior N(0, I), PDP at z = 0, PDP at each route's
  mean latent (route control: the fraction of rollouts taking that route);
* mode coverage: the routes of PDP's prior rollouts next to the demonstrations' routes;
* interpolation: success and route along the line between two route latents;
* shifted scenes (passages closed by walls), each with one expert demonstration of the scene
  and a search budget of simulator rollouts, the same for DP and PDP: DP; DP fine-tuned on the
  demonstration (weights updated, same gradient steps as PDP's adaptation); DP best-of-N over
  its sampling noise (as many search rollouts on the same seeds as PDP's search); PDP adapted
  from z = 0 (ablation); PDP reference adaptation (encoder warm start + optimisation of z, the
  paper's method); PDP constraint search (CEM over z, the project's extension); and, as
  diagnostics, PDP at z = 0 and at the encoder's z without optimisation;
* plots: latent space coloured by route class, latent route map, interpolation trajectories.

Every rollout goes through :func:`embodied.loop.rollout` with the episode seed, as
``embodied eval`` does (:func:`run_episodes`), so the same policy and seeds give the same
per-episode outcome on both paths. Seeds of the training demonstrations, of each scene's
demonstration and search rollouts and of the evaluation episodes are disjoint
(:func:`seed_groups`, checked by :func:`check_disjoint`).

Cells report success as mean ± std over training seeds with a Wilson 95 % interval on the
pooled episodes. Results go to ``results.json`` + ``results.md`` (+ PNGs per run).

Run time (measured on this project's 2-core machine, one thread per process, 3-4 processes
at once): with ``--budget cpu``, one training seed of the ``reference`` variant took 47 min
(VAE 100 epochs ~14 min, PDP and DP 8000 steps each ~13 min, evaluation 6 min) and one of the
``receding`` variant ~25 min (PDP 8 min, DP 7 min, evaluation 10 min). ``full`` trains the
reference VAE for the reference's 5000 epochs (~2 s per step on one CPU thread: ~8 h per seed)
and evaluates all six scenes: a GPU job. ``smoke`` takes about 30 s.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from embodied.apps.lab.budgets import budget_preset
from embodied.apps.lab.pdp_plots import plot_latents, plot_route_histograms
from embodied.apps.lab.stats import format_pooled, markdown_table, pooled_stat
from embodied.apps.route_task import (
    ENV_ID,
    OBS_EXCLUDE,
    collect_demonstrations,
    interpolation_ends,
    make_env,
    route_centroids,
    run_episodes,
    write_interpolation_plot,
)
from embodied.config import Rule, checked, validate
from embodied.errors import ConfigError
from embodied.io import read_json_file, write_json, write_text
from policies.diffusion.adaptation import (
    ADAPT_LR,
    ADAPT_STEPS,
    FINETUNE_LR,
    adapt_z_from_demonstration,
    encode_demonstration,
    finetune_on_demonstration,
    search_z_cem,
)
from policies.diffusion.policy_pdp import PDPPolicy, prior_z
from policies.diffusion.training_pdp import load_train_latents, train_pdp, training_finished

MODES = ("reference", "receding")
"""Policy variants the experiment trains and evaluates (``PDPConfig.variant``)."""
ROUTES = ("left", "center", "right")
"""Route classes of reach_around (``classify_route``; ``none`` = no passage crossed)."""
UNSHIFTED_METHODS: dict[str, str] = {
    "dp": "DP",
    "pdp_prior": "PDP, z ~ N(0, I) (prior)",
    "pdp_z0": "PDP, z = 0",
}
"""Unshifted-scene methods (result key -> table row); route latents add ``pdp_route_<r>``."""
SHIFT_METHODS: dict[str, str] = {
    "dp": "DP",
    "dp_finetune": "DP fine-tuned on the demonstration",
    "dp_best_of_n": "DP best-of-N noise (search budget)",
    "pdp_adapt_zero": "PDP adaptation from z = 0 [ablation]",
    "pdp_adapt": "PDP reference adaptation (encoder + optimisation)",
    "pdp_search": "PDP search (CEM) [extension]",
}
"""Shifted-scene methods of the headline table (result key -> table row)."""
SHIFT_DIAGNOSTICS: dict[str, str] = {
    "pdp_z0": "PDP, z = 0 (no adaptation) [diagnostic]",
    "pdp_encoder": "PDP, encoder z only (no optimisation) [diagnostic]",
}
"""Further shifted-scene cells reported below the headline rows."""
SHIFTED_SCENES = (
    "block_left",
    "block_center",
    "block_right",
    "block_left_center",
    "block_center_right",
    "block_left_right",
)
DEMONSTRATION_SEED0 = 0
"""First env seed of the training demonstrations (they take consecutive seeds)."""
TRAIN_SEED_STRIDE = 100000
"""Training seed ``k``'s evaluation starts at ``evaluation.seed + TRAIN_SEED_STRIDE * k``."""


@dataclass(frozen=True)
class SeedOffsets:
    """Offsets from :func:`evaluate`'s first seed of each group of rollouts (:func:`seed_groups`).

    The unshifted evaluation (DP, PDP prior, z = 0, route latents, interpolation: a paired
    comparison on the same episodes) uses ``[seed, seed + n_eval)``; each shifted scene ``i``
    owns the block ``seed + shifted + i * scene_stride``: its evaluation episodes start at the
    block, the seeds tried for its one demonstration at ``+ shifted_demonstration`` and its
    search rollouts (PDP's CEM and DP's best-of-N, the same seeds) at ``+ search``, so no
    adaptation or search sees an episode it is scored on. :func:`check_disjoint` verifies it
    for the episode counts actually used, and against the training demonstrations' seeds.
    """

    shifted: int = 10000
    """First shifted scene's block."""
    scene_stride: int = 1000
    """Distance between two shifted scenes' blocks."""
    shifted_demonstration: int = 500
    """Within a scene's block: seeds tried for the expert demonstration of the scene."""
    demonstration_tries: int = 50
    """Seeds tried at most for that demonstration (the expert avoids closed passages)."""
    search: int = 600
    """Within a scene's block: the search rollouts (CEM and best-of-N)."""
    latent_plot: int = 20000
    """Rollouts of the latent route-map plot."""
    interpolation_plot: int = 30000
    """Rollouts of the interpolation plot."""


TUNING_SEEDS = range(90000, 100000)
"""Env seeds reserved for tuning (e.g. a search over the DP's configuration or the
fine-tuning learning rate): disjoint from the training demonstrations and from every seed
group of every training seed's evaluation (:func:`evaluate` checks it)."""
SEED_OFFSETS = SeedOffsets()
"""The seed offsets of the experiment."""
CEM_STEP_COST = 1e-3
"""Search cost per control step of a search rollout, added to its failure (0 or 1): among z
(or noise streams) that succeed, prefer the faster ones; 120 steps (the horizon) cost less
than one failure."""
LATENT_GRID_LIM = 2.5
"""The latent route-map plot rolls out z on a grid over ``[-lim, lim]^2`` (knob space), lim at
least this, widened to cover the demonstration latents (the reference variant's raw latents)
up to the knob bound."""


@dataclass(frozen=True)
class PDPEvalConfig:
    """What :func:`evaluate` runs: episode counts, shifted scenes, budgets, first seed.

    Args:
        n_eval: Unshifted evaluation episodes per method (DP, PDP prior, z = 0, each route
            latent).
        n_shift_eval: Episodes per shifted scene and method.
        scenes: Shifted scenes of mujoco:reach_around (passages closed by walls).
        seed: First evaluation seed (training demonstrations use seeds < 1000 by default).
        adapt_steps: Gradient steps of one-demonstration adaptation (z) and of the DP
            fine-tuning (weights): the same budget.
        adapt_lr: Adam learning rate of the z adaptation (the reference's 3e-3).
        finetune_lr: Adam learning rate of the DP fine-tuning on the demonstration.
        cem_iterations: CEM iterations of PDP's constraint search.
        cem_population: CEM candidates per iteration; DP's best-of-N tries
            ``cem_iterations * cem_population`` noise streams.
        cem_rollouts: Search rollouts per candidate (seeds disjoint from evaluation).
        interpolation_points: Latents on the line between two route latents (ends included).
        interpolation_episodes: Episodes per interpolation latent: the first evaluation seeds
            (at most ``n_eval``).
        plot_grid: Latent grid size (per axis) of the route-map plot.
        plots: Write PNG plots.
    """

    config_name: ClassVar[str] = "PDPEvalConfig"

    n_eval: int = checked(50, ge=1, fix="set n_eval >= 1")
    n_shift_eval: int = checked(50, ge=1, fix="set n_shift_eval >= 1")
    scenes: tuple[str, ...] = checked(
        SHIFTED_SCENES, choices=SHIFTED_SCENES, fix=f"use scenes from {SHIFTED_SCENES}"
    )
    seed: int = 1000
    adapt_steps: int = checked(ADAPT_STEPS, ge=1, fix="set adapt_steps >= 1")
    adapt_lr: float = checked(ADAPT_LR, gt=0, fix=f"use e.g. {ADAPT_LR}")
    finetune_lr: float = checked(FINETUNE_LR, gt=0, fix=f"use e.g. {FINETUNE_LR}")
    cem_iterations: int = checked(3, ge=1, fix="set cem_iterations >= 1")
    cem_population: int = checked(8, ge=1, fix="set cem_population >= 1")
    cem_rollouts: int = checked(2, ge=1, fix="set cem_rollouts >= 1")
    interpolation_points: int = checked(
        7, ge=2, fix="use e.g. 7 (the two route latents and 5 points between them)"
    )
    interpolation_episodes: int = checked(50, ge=1, fix="set interpolation_episodes >= 1")
    plot_grid: int = 7
    plots: bool = True

    def __post_init__(self) -> None:
        validate(self)


MODE_OVERRIDES: dict[str, dict[str, Any]] = {
    # reach_around's actions are velocities; the reference's RLBench actions are joint-position
    # targets. Open-loop velocities drift (the reference DP reached 25/100 with them, 65/100
    # with position targets on the same data), so the reference plans positions here.
    # The reference conditions on the whole first state (at s0 the velocity is 0, and the
    # absolute goal lets the planner place its last position target: hiding it cut the
    # reference DP from 24/40 to 8/40 on the same seeds).
    "reference": {"action_space": "position_targets"},
    # PDPConfig's defaults are the strong plain-DP configuration; PDP gets the same. The
    # velocity is hidden from the receding policies (velocity = last action: the copycat
    # shortcut), and the absolute goal with it (redundant with position + goal offset).
    "receding": {"obs_exclude": list(OBS_EXCLUDE)},
}
"""Default per-variant overrides of the experiment's policies (both PDP and DP)."""


@dataclass(frozen=True)
class PDPExperimentConfig:
    """What :func:`run_experiment` runs.

    Args:
        n_demonstrations: Expert demonstrations to collect.
        seeds: Training seeds (PDP and DP trained per seed and mode).
        first_seed: First training seed (seeds first..first+n-1).
        modes: Policy variants to train and evaluate (``reference``, ``receding``).
        steps: Diffusion training steps of every policy (None: each variant's own).
        overrides: Further PDPConfig overrides of every policy, e.g. ``{"manifold.steps": 300}``.
        mode_overrides: Per mode, PDPConfig overrides of that mode's policies (PDP and DP
            alike); default :data:`MODE_OVERRIDES`.
        dp_overrides: PDPConfig overrides of the plain DP only (e.g. a tuned configuration).
        evaluation: The evaluation of each training seed ``k``, whose first evaluation seed
            is ``evaluation.seed + 100000 * k``.
        progress: Show training progress bars.
    """

    config_name: ClassVar[str] = "PDPExperimentConfig"

    n_demonstrations: int = checked(100, ge=2, fix="use n_demonstrations >= 2")
    seeds: int = checked(3, ge=1, fix="use seeds >= 1 (3 by default)")
    first_seed: int = 0
    modes: tuple[str, ...] = checked(
        MODES, choices=MODES, min_len=1, fix=f"give distinct modes from {MODES}"
    )
    steps: int | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)
    mode_overrides: Mapping[str, Mapping[str, Any]] = field(
        default_factory=lambda: {k: dict(v) for k, v in MODE_OVERRIDES.items()}
    )
    dp_overrides: Mapping[str, Any] = field(default_factory=dict)
    evaluation: PDPEvalConfig = field(default_factory=PDPEvalConfig)
    progress: bool = True

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "modes",
            lambda c: len(set(c.modes)) == len(c.modes),
            "names a mode twice",
            f"give distinct modes from {MODES}",
        ),
        Rule(
            "evaluation.seed",
            lambda c: c.seeds == 1 or c.evaluation.seed + TRAIN_SEED_STRIDE <= 2**31,
            "is too large for several training seeds",
            "lower it",
        ),
    )

    def __post_init__(self) -> None:
        validate(self)

    @property
    def train_seeds(self) -> tuple[int, ...]:
        """The training seeds ``first_seed .. first_seed + seeds - 1``."""
        return tuple(range(self.first_seed, self.first_seed + self.seeds))

    @classmethod
    def for_budget(cls, budget: str, **fields: Any) -> PDPExperimentConfig:
        """The config of a :data:`BUDGETS` entry with ``fields`` on top (``evaluation`` fields
        as a mapping under ``"evaluation"``).

        Raises:
            ConfigError: ``budget`` is unknown.
        """
        preset = budget_preset(BUDGETS, budget, "experiment")
        ev = {**dict(preset.pop("evaluation", {})), **dict(fields.pop("evaluation", {}))}
        return cls(**{**preset, **fields}, evaluation=PDPEvalConfig(**ev))


BUDGETS: dict[str, dict[str, Any]] = {
    "full": {},
    "cpu": {
        "overrides": {"manifold.epochs": 100},
        "evaluation": {
            "scenes": ("block_left", "block_center", "block_right"),
            "interpolation_episodes": 20,
        },
    },
    "smoke": {
        "n_demonstrations": 12,
        "seeds": 1,
        "steps": 30,
        "overrides": {"manifold.epochs": 5, "manifold.steps": 10},
        "evaluation": {
            "n_eval": 3,
            "n_shift_eval": 2,
            "scenes": ("block_left",),
            "adapt_steps": 3,
            "cem_iterations": 1,
            "cem_population": 2,
            "cem_rollouts": 1,
            "interpolation_points": 3,
            "interpolation_episodes": 1,
            "plots": False,
        },
    },
}
"""Experiment budgets (:meth:`PDPExperimentConfig.for_budget`): ``full`` = the defaults (3
training seeds, 50 episodes per cell, 6 scenes, each variant's training budget); ``cpu`` =
the same protocol (3 seeds, 50 episodes per cell) on the three one-wall scenes, with the
reference manifold trained for 100 epochs instead of 5000 (its transformer over whole
demonstrations costs ~2 s per step on one CPU thread) and 20 episodes per interpolation point;
``smoke`` = the pipeline in minutes (tests)."""


def success_rate(rows: Sequence[dict[str, Any]]) -> float:
    """Fraction of successful episodes."""
    return float(np.mean([r["success"] for r in rows])) if rows else float("nan")


def cell(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One result cell: success rate, count, n, per-episode outcomes and seeds, and the route
    histogram of the successful episodes."""
    outcomes = [int(r["success"]) for r in rows]
    return {
        "success": success_rate(rows),
        "successes": int(sum(outcomes)),
        "n": len(rows),
        "outcomes": outcomes,
        "seeds": [int(r["seed"]) for r in rows],
        "routes": dict(Counter(r["route"] for r in rows if r["success"])),
    }


def episode_cost(rows: Sequence[dict[str, Any]]) -> float:
    """Search cost of rollouts: mean of ``failure + CEM_STEP_COST * steps``."""
    return float(np.mean([1.0 - r["success"] + CEM_STEP_COST * r["steps"] for r in rows]))


@dataclass
class ConstraintCost:
    """The constraint-only search cost of a shifted scene (no demonstration, only sim rollouts).

    ``cost(Z)[k]`` is :func:`episode_cost` of ``policy`` run at ``Z[k]`` in ``scene`` on
    ``seeds`` (failure: a closed passage's wall hit or timeout). ``rollouts`` counts the
    simulator episodes spent.
    """

    env: Any
    policy: Any
    scene: str
    seeds: Sequence[int]
    rollouts: int = 0

    def __call__(self, cands: np.ndarray) -> np.ndarray:
        """Costs of the candidates ``cands`` (P, z_dim)."""
        vals = []
        for zc in cands:
            rows = run_episodes(self.env, self.policy, self.seeds, self.scene, z=zc)
            self.rollouts += len(rows)
            vals.append(episode_cost(rows))
        return np.asarray(vals)


def constraint_cost(env: Any, policy: Any, scene: str, seeds: Sequence[int]) -> ConstraintCost:
    """The :class:`ConstraintCost` of ``policy`` in ``scene`` on the search ``seeds``."""
    return ConstraintCost(env, policy, scene, list(seeds))


@dataclass
class NoiseSearchResult:
    """Outcome of :func:`best_of_n_noise`.

    Attributes:
        noise_seed: The chosen noise stream (lowest cost, first on ties).
        costs: Cost of each candidate stream ``0 .. n - 1``.
        rollouts: Simulator episodes spent.
    """

    noise_seed: int
    costs: list[float]
    rollouts: int


def best_of_n_noise(
    env: Any, policy: PDPPolicy, scene: str, seeds: Sequence[int], n: int
) -> NoiseSearchResult:
    """Best-of-N over the sampling noise of a policy (e.g. the plain DP) in a shifted scene.

    The DP's counterpart of PDP's constraint search with the same simulator budget: the
    noises of ``noise_seed = 0 .. n - 1`` are each rolled out on the search ``seeds``, the
    same noise in every episode (``noise_per_episode = False``), and scored with
    :func:`episode_cost`; the lowest cost wins and is evaluated the same way, so the noise
    that worked in search is the noise used on unseen episodes. The policy's noise settings
    are restored afterwards.

    Raises:
        ConfigError: ``n < 1``.
    """
    if n < 1:
        raise ConfigError(f"best-of-N needs n >= 1 candidates, got {n}", fix="use n >= 1")
    costs: list[float] = []
    rollouts = 0
    saved = policy.noise_seed, policy.noise_per_episode
    try:
        policy.noise_per_episode = False
        for k in range(n):
            policy.noise_seed = k
            rows = run_episodes(env, policy, seeds, scene)
            rollouts += len(rows)
            costs.append(episode_cost(rows))
    finally:
        policy.noise_seed, policy.noise_per_episode = saved
    return NoiseSearchResult(int(np.argmin(costs)), costs, rollouts)


def seed_groups(config: PDPEvalConfig, offsets: SeedOffsets = SEED_OFFSETS) -> dict[str, range]:
    """Every group of env seeds :func:`evaluate` uses with ``config``, by name.

    ``evaluation`` (unshifted, shared by all its methods), per scene ``<scene>/evaluation``,
    ``<scene>/demonstration`` (seeds tried for its one demonstration) and ``<scene>/search``
    (PDP's CEM and DP's best-of-N), ``latent_plot`` and ``interpolation_plot``.
    """
    s = config.seed
    groups: dict[str, range] = {"evaluation": range(s, s + config.n_eval)}
    for i, scene in enumerate(config.scenes):
        base = s + offsets.shifted + offsets.scene_stride * i
        groups[f"{scene}/evaluation"] = range(base, base + config.n_shift_eval)
        d0 = base + offsets.shifted_demonstration
        groups[f"{scene}/demonstration"] = range(d0, d0 + offsets.demonstration_tries)
        c0 = base + offsets.search
        groups[f"{scene}/search"] = range(c0, c0 + config.cem_rollouts)
    if config.plots:
        groups["latent_plot"] = range(s + offsets.latent_plot, s + offsets.latent_plot + 1)
        p0 = s + offsets.interpolation_plot
        groups["interpolation_plot"] = range(p0, p0 + 1)
    return groups


def check_disjoint(groups: Mapping[str, Sequence[int]]) -> None:
    """Raise if two seed groups share a seed.

    Raises:
        ConfigError: naming the two groups and a shared seed.
    """
    owner: dict[int, str] = {}
    for name, seeds in groups.items():
        for seed in seeds:
            other = owner.setdefault(int(seed), name)
            if other != name:
                raise ConfigError(
                    f"seed groups {other!r} and {name!r} share env seed {seed}",
                    fix="lower n_eval / n_shift_eval / cem_rollouts, move evaluation.seed, or "
                    "widen SeedOffsets, so training, adaptation, search and evaluation episodes "
                    "stay disjoint",
                )


def latent_grid_rollouts(
    env: Any, policy: Any, seed: int, grid: int = 7, lim: float = LATENT_GRID_LIM
) -> tuple[list[np.ndarray], list[dict[str, Any]]]:
    """Roll out ``policy`` (seed ``seed``) at each z of a ``grid`` x ``grid`` grid over
    ``[-lim, lim]^2``; returns the z and the rows (for :func:`plot_latents`)."""
    vals = np.linspace(-lim, lim, grid)
    zs = [np.array([a, b]) for b in vals for a in vals]
    return zs, run_episodes(env, policy, [seed] * len(zs), z=zs)


def interpolation_results(
    env: Any,
    policy: Any,
    centroids: Mapping[str, np.ndarray],
    seeds: Sequence[int],
    n: int = 7,
) -> dict[str, Any]:
    """Success and routes at ``n`` latents on the line between two route latents.

    Returns:
        ``{"ends": [a, b], "points": [{"alpha", "z", **cell}, ...]}`` with one
        :func:`cell` per point over ``seeds``.
    """
    a, b = interpolation_ends(centroids)
    points = []
    for w in np.linspace(0.0, 1.0, n):
        z = (1 - w) * centroids[a] + w * centroids[b]
        rows = run_episodes(env, policy, seeds, z=z)
        points.append({"alpha": float(w), "z": z.tolist(), **cell(rows)})
    return {"ends": [a, b], "points": points}


def coverage_of(routes: Mapping[str, int]) -> dict[str, Any]:
    """Route classes covered (of :data:`ROUTES`) and the entropy of a route histogram."""
    p = np.array([routes.get(k, 0) for k in ROUTES], float)
    q = p[p > 0] / max(p.sum(), 1.0)
    return {
        "route_counts": {k: int(routes.get(k, 0)) for k in ROUTES},
        "classes_covered": int((p > 0).sum()),
        "entropy_nats": max(0.0, float(-(q * np.log(q)).sum())),
    }


def shifted_scene(
    env: Any,
    pdp: PDPPolicy,
    dp: PDPPolicy,
    scene: str,
    index: int,
    config: PDPEvalConfig,
    groups: Mapping[str, range],
) -> dict[str, Any]:
    """Every shifted-scene method in ``scene`` (see :data:`SHIFT_METHODS`), same budgets.

    Information: DP gets nothing; DP fine-tuned, PDP adaptation from z = 0 and PDP reference
    adaptation get the scene's one demonstration and ``adapt_steps`` gradient steps; DP
    best-of-N and PDP search get the same search rollouts (``cem_iterations *
    cem_population`` candidates x ``cem_rollouts`` seeds, the same seeds).

    Returns:
        One :func:`cell` per method and a ``budget`` record of what each method spent.

    Raises:
        RuntimeError: the two searches spent different numbers of rollouts (a bug).
    """
    ev = list(groups[f"{scene}/evaluation"])
    demo_seeds = groups[f"{scene}/demonstration"]
    search_seeds = list(groups[f"{scene}/search"])
    used: list[int] = []
    demonstration = collect_demonstrations(
        1, seed=demo_seeds.start, scene=scene, max_seeds=len(demo_seeds), seeds_used=used
    )
    states, actions = demonstration.states[0], demonstration.actions[0]
    entry: dict[str, Any] = {"dp": cell(run_episodes(env, dp, ev, scene))}
    t = time.perf_counter()
    tuned, ft_loss = finetune_on_demonstration(
        dp, states, actions, steps=config.adapt_steps, lr=config.finetune_lr, seed=index
    )
    ft_s = time.perf_counter() - t
    entry["dp_finetune"] = cell(run_episodes(env, tuned, ev, scene))
    z_dim = pdp.config.z_dim
    entry["pdp_z0"] = cell(run_episodes(env, pdp, ev, scene, z=np.zeros(z_dim)))
    z_enc = encode_demonstration(pdp, states, actions)
    entry["pdp_encoder"] = cell(run_episodes(env, pdp, ev, scene, z=z_enc))
    t = time.perf_counter()
    ad = adapt_z_from_demonstration(
        pdp, states, actions, steps=config.adapt_steps, lr=config.adapt_lr, seed=index
    )
    ad_s = time.perf_counter() - t
    entry["pdp_adapt"] = cell(run_episodes(env, pdp, ev, scene, z=ad.z))
    ad0 = adapt_z_from_demonstration(
        pdp,
        states,
        actions,
        steps=config.adapt_steps,
        lr=config.adapt_lr,
        seed=index,
        z_init="zero",
    )
    entry["pdp_adapt_zero"] = cell(run_episodes(env, pdp, ev, scene, z=ad0.z))
    cost = constraint_cost(env, pdp, scene, search_seeds)
    t = time.perf_counter()
    cem = search_z_cem(
        cost,
        z_dim,
        bound=pdp.config.z_bound,
        iterations=config.cem_iterations,
        population=config.cem_population,
        elites=max(1, config.cem_population // 4),
        seed=index,
    )
    cem_s = time.perf_counter() - t
    entry["pdp_search"] = cell(run_episodes(env, pdp, ev, scene, z=cem.z))
    t = time.perf_counter()
    bon = best_of_n_noise(env, dp, scene, search_seeds, cem.evaluations)
    bon_s = time.perf_counter() - t
    saved = dp.noise_seed, dp.noise_per_episode
    try:
        dp.noise_seed, dp.noise_per_episode = bon.noise_seed, False
        entry["dp_best_of_n"] = cell(run_episodes(env, dp, ev, scene))
    finally:
        dp.noise_seed, dp.noise_per_episode = saved
    if bon.rollouts != cost.rollouts:
        raise RuntimeError(
            f"unequal search budgets in {scene}: DP best-of-N {bon.rollouts} rollouts, "
            f"PDP search {cost.rollouts}"
        )
    entry["budget"] = {
        "demonstration_seed": used[0],
        "demonstration_route": demonstration.labels[0],
        "demonstration_steps": len(states),
        "gradient_steps": config.adapt_steps,
        "search_seeds": search_seeds,
        "search_rollouts": {"dp_best_of_n": bon.rollouts, "pdp_search": cost.rollouts},
        "seconds": {
            "dp_finetune": ft_s,
            "pdp_adapt": ad_s,
            "pdp_search": cem_s,
            "dp_best_of_n": bon_s,
        },
    }
    entry["latents"] = {
        "encoder": z_enc.tolist(),
        "pdp_adapt": ad.z.tolist(),
        "pdp_adapt_zero": ad0.z.tolist(),
        "pdp_search": cem.z.tolist(),
    }
    entry["dp_best_of_n_noise_seed"] = bon.noise_seed
    entry["dp_finetune_loss"] = [ft_loss[0], ft_loss[-1]]
    return entry


def evaluate(
    pdp_dir: str | Path,
    dp_dir: str | Path,
    out_dir: str | Path,
    config: PDPEvalConfig | None = None,
    *,
    training_seeds: Sequence[int] = (),
) -> dict[str, Any]:
    """Evaluate a trained PDP against the plain DP of the same variant; write results + plots.

    Args:
        pdp_dir: PDP checkpoint (``embodied train pdp``; its train state holds the latents).
        dp_dir: The same policy trained with ``--z-dim 0``.
        out_dir: Where ``results.json``, ``results.md`` and PNGs go.
        config: Episode counts, scenes, budgets and the first seed.
        training_seeds: Env seeds of the training demonstrations (checked disjoint from
            every seed used here and from :data:`TUNING_SEEDS`).

    Raises:
        ConfigError: The two checkpoints are of different variants, or seed groups overlap.
    """
    cfg = config or PDPEvalConfig()
    t0 = time.perf_counter()
    groups = seed_groups(cfg)
    check_disjoint(
        {"training demonstrations": list(training_seeds), "tuning": TUNING_SEEDS, **groups}
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    env = make_env()
    pdp = PDPPolicy.from_pretrained(pdp_dir)
    dp = PDPPolicy.from_pretrained(dp_dir)
    mode = str(pdp.config.variant)
    if dp.config.variant != mode or dp.config.uses_z or not pdp.config.uses_z:
        raise ConfigError(
            f"evaluate needs a PDP and a plain DP of one variant; got {pdp_dir} "
            f"({pdp.config.variant}, z_dim={pdp.config.z_dim}) and {dp_dir} "
            f"({dp.config.variant}, z_dim={dp.config.z_dim})",
            fix="train both with the same variant, the DP with --z-dim 0",
        )
    latents, labels = load_train_latents(pdp_dir)
    centroids = route_centroids(latents, labels)
    z_dim = pdp.config.z_dim
    ev = list(groups["evaluation"])
    res: dict[str, Any] = {
        "env_id": ENV_ID,
        "mode": mode,
        "pdp": str(pdp_dir),
        "dp": str(dp_dir),
        "config": asdict(cfg),
        "seed_groups": {k: [v.start, v.stop] for k, v in groups.items()},
    }

    # ---- unshifted: success, route control, coverage, interpolation ------------------------
    rows = {
        "dp": run_episodes(env, dp, ev),
        "pdp_prior": run_episodes(env, pdp, ev, z=[prior_z(s, z_dim) for s in ev]),
        "pdp_z0": run_episodes(env, pdp, ev, z=np.zeros(z_dim)),
    }
    control: dict[str, Any] = {}
    for route, zc in centroids.items():
        rr = run_episodes(env, pdp, ev, z=zc)
        rows[f"pdp_route_{route}"] = rr
        matches = int(sum(r["route"] == route for r in rr))
        control[route] = {
            "z": zc.tolist(),
            "route_match": matches / len(rr),
            "matches": matches,
            "n": len(rr),
            "success": success_rate(rr),
        }
    res["unshifted"] = {k: cell(v) for k, v in rows.items()}
    res["route_control"] = control
    res["coverage"] = {
        "demonstrations": coverage_of(Counter(labels)),
        "pdp_prior": coverage_of(res["unshifted"]["pdp_prior"]["routes"]),
        "dp": coverage_of(res["unshifted"]["dp"]["routes"]),
    }
    res["interpolation"] = interpolation_results(
        env, pdp, centroids, ev[: cfg.interpolation_episodes], cfg.interpolation_points
    )

    # ---- shifted scenes -------------------------------------------------------------------
    res["shifted"] = {
        scene: shifted_scene(env, pdp, dp, scene, i, cfg, groups)
        for i, scene in enumerate(cfg.scenes)
    }
    if cfg.plots:
        grid_seed = groups["latent_plot"].start
        lim = float(np.abs(latents).max()) * 1.2 if latents.size else LATENT_GRID_LIM
        lim = min(max(LATENT_GRID_LIM, lim), float(pdp.config.z_bound))
        grid_z, grid_rows = latent_grid_rollouts(env, pdp, grid_seed, grid=cfg.plot_grid, lim=lim)
        cov = res["coverage"]
        res["plots"] = {
            "coverage": str(
                plot_route_histograms(
                    out / "coverage.png",
                    {
                        "demonstrations": cov["demonstrations"]["route_counts"],
                        "PDP z ~ N(0, I)": cov["pdp_prior"]["route_counts"],
                        "DP": cov["dp"]["route_counts"],
                    },
                    ROUTES,
                )
            ),
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
                    groups["interpolation_plot"].start,
                )
            ),
        }
    res["seconds"] = time.perf_counter() - t0
    write_json(out / "results.json", res)
    write_text(out / "results.md", results_markdown([res]))
    return res


# ---- aggregation and tables -------------------------------------------------------------------


def _by_mode(runs: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    out: dict[str, list[Mapping[str, Any]]] = {}
    for r in runs:
        out.setdefault(str(r.get("mode", "receding")), []).append(r)
    return out


def aggregate(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per mode, every cell's :func:`pooled_stat` over the runs (one per training seed).

    Returns:
        ``{mode: {"seeds", "unshifted", "route_control", "coverage", "interpolation",
        "shifted": {scene | "all": {method: stat}}, "budget"}}``; ``all`` pools the scenes (a
        seed's rate is its success over all scenes' episodes); ``budget`` holds the gradient
        steps and search rollouts per scene.
    """
    out: dict[str, Any] = {}
    for mode, rr in _by_mode(runs).items():
        agg: dict[str, Any] = {"seeds": [r.get("train_seed") for r in rr]}
        keys = [k for k in rr[0]["unshifted"] if all(k in r["unshifted"] for r in rr)]
        agg["unshifted"] = {
            k: pooled_stat([(r["unshifted"][k]["successes"], r["unshifted"][k]["n"]) for r in rr])
            for k in keys
        }
        routes = sorted({k for r in rr for k in r["route_control"]})
        agg["route_control"] = {
            route: pooled_stat(
                [
                    (r["route_control"][route]["matches"], r["route_control"][route]["n"])
                    for r in rr
                    if route in r["route_control"]
                ]
            )
            for route in routes
        }
        agg["coverage"] = {}
        for name in ("demonstrations", "pdp_prior", "dp"):
            counts: Counter[str] = Counter()
            for r in rr:
                counts.update(r["coverage"][name]["route_counts"])
            covered = [r["coverage"][name]["classes_covered"] for r in rr]
            agg["coverage"][name] = {
                "route_counts": {k: int(counts.get(k, 0)) for k in ROUTES},
                "classes_covered_mean": float(np.mean(covered)),
                "classes_covered_min": int(np.min(covered)),
            }
        points = []
        n_points = min(len(r["interpolation"]["points"]) for r in rr)
        for i in range(n_points):
            pts = [r["interpolation"]["points"][i] for r in rr]
            counts = Counter()
            for p in pts:
                counts.update(p["routes"])
            points.append(
                {
                    "alpha": pts[0]["alpha"],
                    "success": pooled_stat([(p["successes"], p["n"]) for p in pts]),
                    "routes": dict(counts),
                }
            )
        agg["interpolation"] = {"ends": rr[0]["interpolation"]["ends"], "points": points}
        methods = [*SHIFT_METHODS, *SHIFT_DIAGNOSTICS]
        scenes = [s for s in rr[0]["shifted"] if all(s in r["shifted"] for r in rr)]
        shifted: dict[str, Any] = {
            s: {
                m: pooled_stat(
                    [(r["shifted"][s][m]["successes"], r["shifted"][s][m]["n"]) for r in rr]
                )
                for m in methods
            }
            for s in scenes
        }
        if scenes:
            shifted["all"] = {
                m: pooled_stat(
                    [
                        (
                            sum(r["shifted"][s][m]["successes"] for s in scenes),
                            sum(r["shifted"][s][m]["n"] for s in scenes),
                        )
                        for r in rr
                    ]
                )
                for m in methods
            }
            budget = rr[0]["shifted"][scenes[0]]["budget"]
            agg["budget"] = {
                "search_rollouts_per_scene": budget["search_rollouts"]["pdp_search"],
                "gradient_steps": budget["gradient_steps"],
            }
        agg["shifted"] = shifted
        out[mode] = agg
    return out


def results_markdown(
    runs: Sequence[Mapping[str, Any]], agg: Mapping[str, Any] | None = None
) -> str:
    """The results as markdown: unshifted and shifted tables with a column per mode.

    Args:
        runs: :func:`evaluate` results (one per mode and training seed).
        agg: Their :func:`aggregate` (computed when not given).
    """
    agg = aggregate(runs) if agg is None else agg
    modes = [m for m in MODES if m in agg] + [m for m in agg if m not in MODES]
    dash = "–"

    def get(d: Mapping[str, Any], *keys: str) -> str:
        for k in keys:
            if not isinstance(d, Mapping) or k not in d:
                return dash
            d = d[k]
        return format_pooled(d)  # type: ignore[arg-type]

    n_seeds = {m: len(agg[m]["seeds"]) for m in modes}
    lines = [
        f"# PDP on `{ENV_ID}`: " + ", ".join(f"{m} ({n_seeds[m]} training seed(s))" for m in modes),
        "",
        "Cells: success in %, mean ± std over training seeds [Wilson 95 % interval of the pooled "
        "episodes] (pooled episodes). `reference` = the reference code's open-loop "
        "whole-trajectory PDP; `receding` = the project's receding-horizon extension. DP = the "
        "same policy without z (`z_dim=0`).",
        "",
        "## Unshifted scene",
        "",
    ]
    routes = sorted({r for m in modes for r in agg[m]["route_control"]})
    rows = [
        [label, *(get(agg[m], "unshifted", k) for m in modes)]
        for k, label in UNSHIFTED_METHODS.items()
    ]
    rows += [
        [f"PDP, z = {r} route latent", *(get(agg[m], "unshifted", f"pdp_route_{r}") for m in modes)]
        for r in routes
    ]
    lines += markdown_table(["method", *modes], rows)
    lines += ["", "## Shifted scenes (all scenes pooled)", ""]
    rows = [
        [label, *(get(agg[m], "shifted", "all", k) for m in modes)]
        for k, label in SHIFT_METHODS.items()
    ]
    rows += [
        [label, *(get(agg[m], "shifted", "all", k) for m in modes)]
        for k, label in SHIFT_DIAGNOSTICS.items()
    ]
    lines += markdown_table(["method", *modes], rows)
    budget = [
        f"{m}: {agg[m].get('budget', {}).get('gradient_steps', dash)} gradient steps on the one "
        f"demonstration (z adaptation and DP fine-tuning), "
        f"{agg[m].get('budget', {}).get('search_rollouts_per_scene', dash)} search rollouts per "
        "scene (PDP search and DP best-of-N, the same seeds)"
        for m in modes
    ]
    lines += ["", "Budgets per scene: " + "; ".join(budget) + ".", ""]
    lines += ["## Mode coverage (routes of successful unshifted episodes)", ""]
    cov_rows = []
    for m in modes:
        c = agg[m]["coverage"]
        for name, label in (
            ("demonstrations", "training demonstrations"),
            ("pdp_prior", "PDP, z ~ N(0, I)"),
            ("dp", "DP"),
        ):
            if name == "demonstrations" and m != modes[0]:
                continue
            counts = c[name]["route_counts"]
            cov_rows.append(
                [
                    label if name == "demonstrations" else f"{m}: {label}",
                    *(str(counts.get(r, 0)) for r in ROUTES),
                    f"{c[name]['classes_covered_min']}/3",
                ]
            )
    lines += markdown_table(["", *ROUTES, "classes covered (min over seeds)"], cov_rows)
    lines += ["", "## Route control (z = a route's mean latent: rollouts taking that route)", ""]
    lines += markdown_table(
        ["route", *modes], [[r, *(get(agg[m], "route_control", r) for m in modes)] for r in routes]
    )
    for m in modes:
        itp = agg[m]["interpolation"]
        a, b = itp["ends"]
        lines += ["", f"## Interpolation {m}: z = (1 - a) z_{a} + a z_{b}", ""]
        lines += markdown_table(
            ["a", "success", "routes (successful)"],
            [
                [f"{p['alpha']:.2f}", format_pooled(p["success"]), str(p["routes"])]
                for p in itp["points"]
            ],
        )
    for m in modes:
        scenes = [s for s in agg[m]["shifted"] if s != "all"]
        if not scenes:
            continue
        methods = {**SHIFT_METHODS, **SHIFT_DIAGNOSTICS}
        lines += ["", f"## Shifted scenes per scene ({m})", ""]
        lines += markdown_table(
            ["scene", *methods.values()],
            [[s, *(get(agg[m], "shifted", s, k) for k in methods)] for s in scenes],
        )
    seconds = sum(float(r.get("seconds", 0.0)) for r in runs)
    lines += ["", f"Evaluation wall time: {seconds:.0f} s.", ""]
    return "\n".join(lines)


def _train(
    data_dir: Path,
    ckpt: Path,
    overrides: Mapping[str, Any],
    progress: bool,
) -> None:
    if (ckpt / "config.json").exists() and training_finished(ckpt):
        return
    train_pdp(
        data_dir,
        ckpt,
        None,
        overrides=dict(overrides),
        resume=(ckpt / "train_state.json").exists(),
        progress=progress,
    )


def policy_overrides(config: PDPExperimentConfig, mode: str, seed: int, dp: bool) -> dict[str, Any]:
    """The ``train_pdp`` overrides of one policy of the experiment (PDP or DP)."""
    return {  # later entries win: the variant's defaults, then what the caller set
        "variant": mode,
        **dict(config.mode_overrides.get(mode, {})),
        **dict(config.overrides),
        **({"steps": config.steps} if config.steps else {}),
        **(dict(config.dp_overrides) if dp else {}),
        "z_dim": 0 if dp else 2,
        "seed": seed,
    }


def run_experiment(
    out_dir: str | Path, config: PDPExperimentConfig | None = None
) -> dict[str, Any]:
    """Collect demonstrations, train PDP and DP per mode and training seed, evaluate, aggregate.

    Writes ``OUT/demonstrations`` (dataset) + ``OUT/demonstration_seeds.json``,
    ``OUT/<mode>/seed<k>/{pdp,dp,eval}`` and ``OUT/results.json`` + ``OUT/results.md``.
    Existing checkpoints are reused (unfinished ones resumed).
    """
    cfg = config or PDPExperimentConfig()
    out = Path(out_dir)
    data_dir = out / "demonstrations"
    seeds_file = out / "demonstration_seeds.json"
    if not (data_dir / "meta.json").exists() or not seeds_file.exists():
        # a run from before the seeds file: replay the (deterministic) collection to learn them
        used: list[int] = []
        collect_demonstrations(
            cfg.n_demonstrations,
            seed=DEMONSTRATION_SEED0,
            out_dir=None if (data_dir / "meta.json").exists() else data_dir,
            seeds_used=used,
        )
        write_json(seeds_file, {"seeds": used})
    demo_seeds = list(read_json_file(seeds_file, what="demonstration seeds")["seeds"])
    runs = []
    for mode in cfg.modes:
        for s in cfg.train_seeds:
            root = out / mode / f"seed{s}"
            for name, is_dp in (("pdp", False), ("dp", True)):
                _train(data_dir, root / name, policy_overrides(cfg, mode, s, is_dp), cfg.progress)
            evaluation = replace(cfg.evaluation, seed=cfg.evaluation.seed + TRAIN_SEED_STRIDE * s)
            res = evaluate(
                root / "pdp", root / "dp", root / "eval", evaluation, training_seeds=demo_seeds
            )
            res["train_seed"] = s
            write_json(root / "eval" / "results.json", res)
            runs.append(res)
    agg = aggregate(runs)
    summary: dict[str, Any] = {
        "runs": runs,
        "aggregate": agg,
        "modes": list(cfg.modes),
        "train_seeds": list(cfg.train_seeds),
        "n_demonstrations": cfg.n_demonstrations,
        "demonstration_seeds": [min(demo_seeds), max(demo_seeds)],
    }
    write_json(out / "results.json", summary)
    write_text(out / "results.md", results_markdown(runs, agg))
    return summary
