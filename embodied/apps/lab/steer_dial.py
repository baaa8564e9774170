"""A VLA whose speed is a dial: graded-speed demonstrations, three ways to extract a speed
direction, and the dose-response that shows whether steering along it is a dial.

Why (issue #36): the tiny VLA trained on three speed classes named by adverbs ("slowly",
plain, "quickly") on a fixed cube layout learnt three classes, not a continuum, and its
extracted direction turned the arm off its path instead of changing its speed (the fixed
layout let the cube colour encode the whole path). Here:

1. Demonstrations (:func:`collect_graded_demonstrations`): the scripted expert's cruise speed is
   drawn per episode from a continuous range, on random cube layouts (each reset seed a distinct
   scene). ``labels`` says how the prompt names the speed: ``"none"`` (the plain instruction:
   speed is not named), ``"continuum"`` (an ordered scale, "at speed 1" ... "at speed 9", one
   word per ninth of the range) or ``"adverbs"`` (the three named classes of the earlier
   experiment, kept to reproduce it).
2. Directions (:func:`extract_direction`), at one decoder layer and set of positions:
   ``mean_difference`` (fast minus slow demonstration steps, the thirds taken over *episodes*
   by their speed), ``paired`` (the same frames under the fastest and the slowest prompt,
   averaged differences: needs named speeds) and ``probe`` (a ridge regression of the speed on
   the activations; the direction moves the probe's reading by the fast-slow difference at
   alpha = 1, the scale of the mean difference).
3. The dose-response (:func:`dose_response`): mean end-effector speed and success against a
   fixed alpha on tuning seeds, with intervals; :func:`check_dial` names the working range
   (contiguous alphas around 0 where success holds) and whether speed is monotone over it and
   spans the target range (0.5x-1.5x the unsteered speed).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

import policies
from embodied.apps.lab.config_steer import (
    CONTINUUM_LEVELS,
    DESCENT_START_M,
    HEIGHT_START_M,
    POSITIONS,
    STEER_CONCEPTS,
    height_expert_kwargs,
    height_meta,
)
from embodied.apps.lab.stats import Z95, wilson_interval
from embodied.apps.training.training_vla import (
    SPEED_LEVELS,
    DemonstrationCollector,
    Log,
    no_log,
)
from embodied.contracts import Env, Policy
from embodied.errors import ConfigError
from embodied.loop import rollout
from policies.openvla.modeling_openvla import OpenVLAModel
from policies.openvla.processor_openvla import OpenVLAProcessor, action_stats, normalize
from policies.openvla.steering import (
    STEERING_SITES,
    SteeringDirection,
    collect_activations,
    mean_difference,
)
from policies.openvla.training_openvla import DemonstrationSteps

SPEED_LABELS = ("none", "continuum", "adverbs")
"""How a graded demonstration's prompt names its speed (see the module docstring)."""
ADVERB_LEVELS = SPEED_LEVELS
"""The earlier experiment's three classes: level -> (speed range m/s, adverb)."""
METHODS = ("mean_difference", "paired", "probe")
"""Direction extraction methods of :func:`extract_direction`."""
_SUFFIX = re.compile(r"\s+(?:quickly|slowly|at (?:speed|height) \d+)$")


def check_labels(labels: str) -> None:
    """Refuse an unknown ``labels`` value (names it and the choices)."""
    if labels not in SPEED_LABELS:
        raise ConfigError(
            f"speed_labels {labels!r} is not one of {list(SPEED_LABELS)}",
            fix="use none (speed not named), continuum (ordered scale) or adverbs",
        )


def continuum_word(speed: float, speed_range: tuple[float, float], concept: str = "speed") -> str:
    """The ``continuum`` label of ``speed`` (the concept's value): "at <concept> k", k = 1..9 by
    ninths of the range."""
    lo, hi = speed_range
    k = int(
        np.clip(math.floor((speed - lo) / (hi - lo) * CONTINUUM_LEVELS), 0, CONTINUUM_LEVELS - 1)
    )
    return f"at {concept} {k + 1}"


def speed_prompt(
    instruction: str,
    speed: float,
    labels: str,
    speed_range: tuple[float, float],
    concept: str = "speed",
) -> str:
    """The prompt of a demonstration whose ``concept`` is ``speed`` under ``labels`` (adverbs
    name speeds only)."""
    check_labels(labels)
    if labels == "none":
        return instruction
    if labels == "continuum":
        return f"{instruction} {continuum_word(speed, speed_range, concept)}"
    for (lo, hi), adverb in ADVERB_LEVELS.values():
        if lo <= speed <= hi:
            return f"{instruction} {adverb}".strip()
    return instruction  # between the classes' ranges: unnamed, as the plain class


def base_instruction(prompt: str) -> str:
    """``prompt`` without its speed words (the plain instruction)."""
    return _SUFFIX.sub("", prompt)


def extreme_prompts(labels: str, concept: str = "speed") -> tuple[str, str]:
    """The words of the highest and the lowest ``concept`` prompt under ``labels``.

    Raises:
        ConfigError: ``labels == "none"``: the prompt does not name the speed, so there is no
            prompt pair (use mean_difference or probe).
    """
    check_labels(labels)
    if labels == "none":
        raise ConfigError(
            "method paired needs prompts that name the speed, but speed_labels is 'none'",
            fix="use --method mean_difference or probe, or --speed-labels continuum",
        )
    if labels == "continuum":
        return f"at {concept} {CONTINUUM_LEVELS}", f"at {concept} 1"
    return "quickly", "slowly"


def collect_graded_demonstrations(
    env: Env,
    episodes: int,
    labels: str = "none",
    speed_range: tuple[float, float] = (0.04, 0.25),
    seed: int = 0,
    reset_options: dict[str, Any] | None = None,
    targets: Sequence[str] = (),
    log: Log = no_log,
    unnamed_fraction: float = 0.0,
    concept: str = "speed",
    height_range: tuple[float, float] = (0.03, 0.15),
    height_speed: float = 0.08,
    height_start_range: tuple[float, float] | None = None,
    height_descents: int = 0,
) -> DemonstrationSteps:
    """Expert demonstrations whose cruise speed (or height) is drawn per episode.

    Episode ``e`` resets with seed ``seed + e`` (a distinct scene on a random layout) and
    target ``targets[e % len(targets)]``; under ``labels="adverbs"`` a third of the episodes
    come from each of :data:`ADVERB_LEVELS`' ranges instead (the earlier experiment's data).

    Args:
        env: The env (``mujoco:arm_reach``) with a camera.
        episodes: Demonstration episodes in all.
        labels: How the prompt names the speed (:data:`SPEED_LABELS`).
        speed_range: (min, max) cruise speed in m/s.
        seed: First reset seed.
        reset_options: Base reset options.
        targets: Target names cycled through reset option ``target`` (empty = env's choice).
        log: Progress printer.
        unnamed_fraction: Fraction of episodes (drawn from ``seed``) whose prompt is the plain
            instruction even though ``labels`` names speeds (ours: the plain prompt learns the
            average speed, as classifier-free guidance drops its condition).
        concept: ``speed`` (the cruise speed drawn from ``speed_range``) or ``height`` (the
            ``level`` expert at ``height_speed`` m/s, its hover height above the target drawn
            from ``height_range`` m; labels "at height k" by ninths of that range).
        height_range: Height concept: hover heights (min, max) above the grasp point (m).
        height_speed: Height concept: the cruise speed (m/s).
        height_start_range: Height concept: (min, max) fingertip start height above the
            table (m), drawn per episode (seeded by ``seed``) at the x, y of ``reset_options``'
            ``start`` (default :data:`HEIGHT_START_M`'s); None or min == max: the start of
            ``reset_options`` unchanged.
        height_descents: Height concept: episodes added after ``episodes`` that start near
            the target, :data:`DESCENT_START_M` from it horizontally toward the usual start, at
            a height drawn from ``height_start_range`` (seeded by ``seed``), each under its own
            drawn prompt, always named: the expert descends onto the cube from many heights
            under every prompt (ours: a steered arm reaches the descent off its prompt's
            height, where the cruise-only data show none). The first ``episodes`` are
            unchanged.

    Returns:
        Steps whose ``concept`` is the episode's cruise speed (m/s) or cruise height above the
        table (m).
    """
    check_labels(labels)
    if concept not in STEER_CONCEPTS or (concept != "speed" and labels == "adverbs"):
        raise ConfigError(
            f"concept {concept!r} with labels {labels!r}: concepts are {list(STEER_CONCEPTS)} "
            "and adverbs name speeds only",
            fix="use --concept speed, or --speed-labels continuum with --concept height",
        )
    unnamed = np.random.default_rng([seed, 36]).random(episodes) < unnamed_fraction
    start_z, drawn = None, None
    if concept == "height" and height_start_range and height_start_range[0] < height_start_range[1]:
        drawn = [float(v) for v in height_start_range]
        # its own stream, so the episodes' other draws are those of a fixed start
        start_z = np.random.default_rng([seed, 37]).uniform(drawn[0], drawn[1], size=episodes)
    if height_descents and (concept != "height" or not drawn):
        raise ConfigError(
            f"height_descents={height_descents} needs the height concept and a drawn start "
            f"height, but concept is {concept!r} and height_start_range {height_start_range!r}",
            fix="add --concept height --height-start-range MIN,MAX, or drop --height-descents",
        )
    descent_rng = np.random.default_rng([seed, 38])  # its own stream, as the start heights
    steps = DemonstrationCollector(env.observation_spec.image_keys[0])
    experts: list[Any]
    word_range: tuple[float, float]
    if concept == "height":
        experts = [
            policies.load(
                "expert", env=env, seed=seed, hover_range=tuple(height_range),
                **height_expert_kwargs(height_speed),
            )
        ]  # fmt: skip
        word_range = (float(height_range[0]), float(height_range[1]))
    else:
        ranges = [r for r, _ in ADVERB_LEVELS.values()] if labels == "adverbs" else [speed_range]
        experts = [
            policies.load("expert", env=env, speed_range=tuple(r), seed=seed) for r in ranges
        ]
        word_range = (float(speed_range[0]), float(speed_range[1]))
    for e in range(episodes + height_descents):
        expert = experts[e % len(experts)]
        opts = dict(reset_options or {})
        if targets:
            opts["target"] = targets[(e // len(experts)) % len(targets)]
        if e >= episodes:
            opts["start"] = descent_start(env, seed + e, opts, descent_rng, drawn)  # type: ignore[arg-type]
        elif start_z is not None:
            x, y = opts.get("start", HEIGHT_START_M)[:2]
            opts["start"] = [float(x), float(y), float(start_z[e])]
        ep = rollout(env, expert, seed=seed + e, reset_options=opts or None)
        if concept == "height":  # labelled by the drawn hover height, measured above the table
            word, value = float(expert.current_hover), float(expert.hover_z)
        else:
            word = value = float(expert.current_speed)  # the expert's drawn cruise speed
        prompt = "none" if e < episodes and unnamed[e] else labels
        text = speed_prompt(ep.instruction, word, prompt, word_range, concept)
        steps.add(ep, e, text, value)
        if e < episodes and (e + 1) % max(1, episodes // 8) == 0:
            log(
                f"graded demonstrations: {e + 1}/{episodes} episodes, "
                f"{len(steps.instructions)} steps"
            )
    return steps.build(
        {
            "env_id": env.env_id,
            "camera": steps.camera,
            "speed_labels": labels,
            "speed_range": list(speed_range),
            "concept": concept,
            **(
                height_meta(height_range, height_speed, drawn, height_descents)
                if concept == "height"
                else {}
            ),
            "unnamed_fraction": unnamed_fraction,
            "first_seed": seed,
        },
    )


def descent_start(
    env: Env,
    seed: int,
    reset_options: Mapping[str, Any],
    rng: np.random.Generator,
    z_range: Sequence[float],
) -> list[float]:
    """A fingertip start near the target of the scene that ``seed`` resets to: drawn
    :data:`DESCENT_START_M` from it horizontally, toward the start of ``reset_options`` (default
    :data:`HEIGHT_START_M`), so the arm comes from where a cruise comes from, at a height drawn
    from ``z_range`` (m).

    The env is reset once to read the target; a ``start`` moves only the arm, so the episode's
    own reset with it places the same cubes.
    """
    env.reset(seed=seed, options=dict(reset_options))
    target = np.asarray(env.task.target_point(), dtype=np.float64)[:2]  # type: ignore[attr-defined]
    away = np.asarray(reset_options.get("start", HEIGHT_START_M)[:2], dtype=np.float64) - target
    distance, z = rng.uniform(*DESCENT_START_M), rng.uniform(float(z_range[0]), float(z_range[1]))
    x, y = target + away / max(float(np.linalg.norm(away)), 1e-9) * distance
    return [float(x), float(y), float(z)]


def speed_named(demonstrations: DemonstrationSteps) -> np.ndarray:
    """Which steps' prompts name their speed (all of them unless ``unnamed_fraction`` > 0).

    With ``unnamed_fraction`` > 0 the unnamed steps carry no speed information in the prompt,
    so the directions are contrasted (and probed) over the named ones only.
    """
    if not float(demonstrations.meta.get("unnamed_fraction", 0.0)) > 0:
        return np.ones(len(demonstrations), bool)
    named = np.array([base_instruction(p) != p for p in demonstrations.instructions], bool)
    return named if named.any() else np.ones(len(named), bool)


def episode_contrast(
    concept: np.ndarray,
    episode: np.ndarray,
    fraction: float = 1 / 3,
    named: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Steps of the fastest and of the slowest ``fraction`` of *episodes* (by their mean concept).

    Thirds over episodes, not over steps: slow episodes are longer, so thirds of steps put
    medium-speed episodes in the slow set (and, with named classes, plain steps in the fast set).
    ``named`` (a step mask) keeps only those steps' episodes in the contrast.

    Raises:
        ConfigError: Fewer than two episodes, or no spread in the concept.
    """
    ids = np.unique(episode if named is None else episode[named])
    per = np.array([concept[episode == i].mean() for i in ids])
    k = max(1, round(len(ids) * fraction))
    if len(ids) < 2 or np.ptp(per) <= 0:
        raise ConfigError(
            f"{len(ids)} demonstration episode(s) with speeds spanning {np.ptp(per) if len(per) else 0:g}",
            fix="collect demonstrations at several speeds (at least 2 episodes)",
        )
    order = np.argsort(per, kind="stable")
    fast, slow = ids[order[-k:]], ids[order[:k]]
    return np.isin(episode, fast), np.isin(episode, slow)


def word_position(processor: OpenVLAProcessor, instruction: str, hi: str, lo: str) -> int:
    """Where the speed words sit in a prompt: positions from its end (1 = the last token).

    The last position where the prompts ``instruction hi`` and ``instruction lo`` differ, e.g.
    the number of "at speed 9" / "at speed 1"; the template's tail after the instruction is
    fixed, so the offset holds for every instruction.

    Raises:
        ConfigError: The two prompts differ in length (speed words of unequal token counts) or
            not at all.
    """
    a = processor.prompt_ids(f"{instruction} {hi}")
    b = processor.prompt_ids(f"{instruction} {lo}")
    differ = [i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y]
    if len(a) != len(b) or not differ:
        raise ConfigError(
            f"speed words {hi!r} and {lo!r} give prompts of {len(a)} and {len(b)} tokens that "
            f"differ at {len(differ)} positions; positions 'word' needs one word position",
            fix="use --positions last, or speed labels whose words are one token each",
        )
    return len(a) - differ[-1]


def _activations(
    model: OpenVLAModel,
    processor: OpenVLAProcessor,
    demonstrations: DemonstrationSteps,
    idx: np.ndarray,
    layer: int,
    positions: str | int,
    unnorm_key: str | None,
    prompts: Sequence[str] | None = None,
    site: str = "output",
) -> torch.Tensor:
    """Residual activations of steps ``idx`` (optionally under other ``prompts``).

    ``positions`` is last, text or action, or an int: that one prompt position from the end.
    """
    stats = action_stats(model.config, unnorm_key)
    tokens = processor.actions.encode(normalize(demonstrations.actions[idx], stats))
    d = tokens.shape[1]
    suffix = tokens[:, :-1].tolist() if positions == "action" else None
    texts = list(prompts) if prompts is not None else [demonstrations.instructions[i] for i in idx]
    ids, am = processor.encode_prompts(texts, suffix)
    pv = processor.images(demonstrations.images[idx]).to(model.dtype)
    where = "input" if site == "input" else "residual"
    if isinstance(positions, int):
        return collect_activations(model, pv, ids, am, layer, 1, site=where, position=positions)
    n_last = {"text": int(am.sum(1).min()) - 1, "action": d, "last": 1}[positions]
    return collect_activations(model, pv, ids, am, layer, n_last=n_last, site=where)


def ridge_probe(
    x: torch.Tensor, y: np.ndarray, groups: np.ndarray, ridge: float = 1e-2
) -> tuple[torch.Tensor, dict[str, float]]:
    """Linear probe ``y ~ w . (x - mean)``, closed-form ridge, with held-out R^2.

    Args:
        x: (N, hidden) activations.
        y: (N,) target (speed, m/s).
        groups: (N,) episode of each row: R^2 is measured on the held-out fifth of the episodes
            (steps of one episode are not independent).
        ridge: Penalty as a fraction of the mean eigenvalue of the covariance.

    Returns:
        ``w`` (hidden,) in m/s per activation unit (fitted on all rows) and
        ``{"r2_train", "r2_heldout"}``.
    """
    x64 = x.double()
    y64 = torch.as_tensor(np.asarray(y, dtype=np.float64))

    def fit(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        xm, ym = x64[rows].mean(0), y64[rows].mean()
        xc = x64[rows] - xm
        cov = xc.T @ xc
        lam = ridge * float(torch.trace(cov)) / cov.shape[0] + 1e-12
        w = torch.linalg.solve(
            cov + lam * torch.eye(cov.shape[0], dtype=cov.dtype), xc.T @ (y64[rows] - ym)
        )
        return w, xm, ym

    def r2(rows: torch.Tensor, w: torch.Tensor, xm: torch.Tensor, ym: torch.Tensor) -> float:
        pred = (x64[rows] - xm) @ w + ym
        ss = float(((y64[rows] - y64[rows].mean()) ** 2).sum())
        return 1.0 - float(((y64[rows] - pred) ** 2).sum()) / ss if ss > 0 else math.nan

    every = torch.arange(len(y64))
    ids = np.unique(groups)
    held = np.isin(groups, ids[np.arange(len(ids)) % 5 == 4])
    info = {"r2_train": math.nan, "r2_heldout": math.nan}
    if held.any() and (~held).any():
        w_tr, xm, ym = fit(torch.as_tensor(np.flatnonzero(~held)))
        info["r2_heldout"] = r2(torch.as_tensor(np.flatnonzero(held)), w_tr, xm, ym)
    w, xm, ym = fit(every)
    info["r2_train"] = r2(every, w, xm, ym)
    return w.float(), info


def extract_direction(
    model: OpenVLAModel,
    processor: OpenVLAProcessor,
    demonstrations: DemonstrationSteps,
    method: str = "mean_difference",
    layer: int | None = None,
    positions: str = "last",
    unnorm_key: str | None = None,
    max_steps: int = 600,
    seed: int = 0,
    site: str = "output",
) -> SteeringDirection:
    """The direction of the demonstrations' concept (``meta["concept"]``: speed or height) by
    ``method`` (:data:`METHODS`) at decoder ``layer`` and ``positions``.

    All three have the scale of the mean difference: alpha = 1 moves the activations (or the
    probe's reading) from the slow third of the demonstrations to the fast third.

    ``positions`` last, text and action average the contrast over those positions and the
    direction is added at every position (the references' way); ``word`` takes it at the
    speed word's own prompt position (:func:`word_position`) and adds it there only (ours).
    ``site`` ``input`` reads and steers the residual stream entering ``layer`` (layer 0: the
    embeddings), ``output`` the layer's output.

    Raises:
        ConfigError: An unknown method, positions or site; ``paired`` or ``word`` on prompts
            without speed words.
    """
    if method not in METHODS:
        raise ConfigError(
            f"method {method!r} is not one of {list(METHODS)}", fix="use mean_difference"
        )
    if positions not in POSITIONS:
        raise ConfigError(
            f"positions {positions!r} is not one of {list(POSITIONS)}", fix="use last"
        )
    if site not in STEERING_SITES:
        raise ConfigError(f"site {site!r} is not one of {list(STEERING_SITES)}", fix="use output")
    layer = (len(model.decoder_layers) - 1) // 2 if layer is None else int(layer)
    at: str | int = positions
    concept = str(demonstrations.meta.get("concept", "speed"))
    labels = str(demonstrations.meta.get("speed_labels", "adverbs"))
    if positions == "word":
        hi, lo = extreme_prompts(labels, concept)
        at = word_position(processor, base_instruction(demonstrations.instructions[0]), hi, lo)
    rng = np.random.default_rng(seed)
    named = speed_named(demonstrations)
    fast, slow = episode_contrast(demonstrations.concept, demonstrations.episode, named=named)
    delta = float(demonstrations.concept[fast].mean() - demonstrations.concept[slow].mean())
    meta: dict[str, Any] = {
        "method": method,
        "positions": positions,
        "contrast": f"highest vs lowest {concept} third of demonstration episodes",
        "concept_positive_mean": float(demonstrations.concept[fast].mean()),
        "concept_negative_mean": float(demonstrations.concept[slow].mean()),
        "model": model.config.name,
        **{k: v for k, v in demonstrations.meta.items() if isinstance(v, (str, int, float))},
    }

    def sample(mask: np.ndarray, n: int) -> np.ndarray:
        idx = np.flatnonzero(mask)
        return np.sort(rng.choice(idx, size=min(n, len(idx)), replace=False))

    def acts(idx: np.ndarray, prompts: Sequence[str] | None = None) -> torch.Tensor:
        return _activations(
            model, processor, demonstrations, idx, layer, at, unnorm_key, prompts, site
        )

    meta["site"] = site

    def direction(vec: torch.Tensor, info: dict[str, Any]) -> SteeringDirection:
        position = at if isinstance(at, int) else None
        return SteeringDirection(vec.float(), layer, f"ee_{concept}", info, site, position)

    if method == "mean_difference":
        d = mean_difference(
            acts(sample(fast, max_steps // 2)), acts(sample(slow, max_steps // 2)), layer,
            f"ee_{concept}", meta,
        )  # fmt: skip
        return direction(d.vector, d.meta)
    if method == "paired":
        hi, lo = extreme_prompts(labels, concept)
        idx = sample(np.ones(len(demonstrations), bool), max_steps // 2)
        base = [base_instruction(demonstrations.instructions[i]) for i in idx]
        diff = acts(idx, [f"{b} {hi}" for b in base]) - acts(idx, [f"{b} {lo}" for b in base])
        vec = diff.mean(0)
        meta |= {
            "pair": [hi, lo],
            "n_pairs": len(idx),
            "norm": float(vec.norm()),
            "pair_consistency": float(
                torch.nn.functional.cosine_similarity(diff, vec[None]).mean()
            ),
        }
        return direction(vec, meta)
    idx = sample(named, max_steps)
    w, info = ridge_probe(acts(idx), demonstrations.concept[idx], demonstrations.episode[idx])
    vec = w * (delta / float(w @ w))  # alpha = 1 moves the reading by the fast-slow difference
    meta |= {"norm": float(vec.norm()), "probe": info, "n_steps": len(idx)}
    return direction(vec, meta)


# ---------------------------------------------------------------------------------------------
# dose-response
# ---------------------------------------------------------------------------------------------


FEEDBACK_START_Z_M = (0.08, 0.11, 0.14, 0.17, 0.2)
"""Start heights above the table (m) of :func:`height_feedback_map`: the demonstrations'
cruise heights, 0.078-0.198 m at the default ``height_range``."""
FEEDBACK_LEVELS = (1, 3, 5, 7, 9)
"""The "at height k" prompts of :func:`height_feedback_map`."""


def height_feedback_map(
    env: Env,
    policy_for: Callable[[str], Policy],
    reset_options: dict[str, Any],
    seeds: Sequence[int],
    start_z: Sequence[float] = FEEDBACK_START_Z_M,
    levels: Sequence[int] = FEEDBACK_LEVELS,
) -> dict[str, Any]:
    """Does a prompt name a height the policy returns to? Its first commanded vertical speed
    from each start height under each "at height k" prompt, unsteered.

    A policy that perceives its height climbs below its prompt's height and sinks above it (the
    sign of each row flips between columns); one that learnt a single climb from a single start
    height answers every start the same.

    Args:
        env: ``mujoco:arm_reach`` with a camera.
        policy_for: The policy whose instruction ends with the given words (e.g. "at height 3").
        reset_options: Reset options (layout); their ``start`` gives the x, y.
        seeds: Scenes (reset seeds) averaged over.
        start_z: Start heights above the table (m).
        levels: The prompts' k.

    Returns:
        ``{"start_z_m", "levels", "vz_mps"}``, ``vz_mps[i][j]`` the mean first vz (m/s) from
        ``start_z[i]`` under "at height ``levels[j]``".
    """
    vz = env.action_spec.names.index("vz")
    x, y = reset_options.get("start", HEIGHT_START_M)[:2]
    policies_k = [policy_for(f"at height {k}") for k in levels]
    table = np.zeros((len(start_z), len(levels)))
    for seed in seeds:
        for i, z in enumerate(start_z):
            obs, _ = env.reset(seed=int(seed), options={**reset_options, "start": [x, y, z]})
            for j, policy in enumerate(policies_k):
                policy.reset()
                table[i, j] += float(np.asarray(policy.select_action(obs))[vz])
    table /= max(1, len(seeds))
    return {
        "start_z_m": [float(z) for z in start_z],
        "levels": [int(k) for k in levels],
        "vz_mps": np.round(table, 4).tolist(),
    }


def dose_point(alpha: float, episodes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One point of the dose-response from the episode rows of a fixed-alpha run.

    ``episodes`` rows carry ``success`` and ``mean_concept`` (the concept's units); its interval is a
    normal 95 % interval over episodes, success a Wilson interval.
    """
    speeds = np.array([e["mean_concept"] for e in episodes], dtype=np.float64)
    speeds = speeds[np.isfinite(speeds)]
    wins = sum(bool(e["success"]) for e in episodes)
    half = float(Z95 * speeds.std(ddof=1) / math.sqrt(len(speeds))) if len(speeds) > 1 else math.nan
    mean = float(speeds.mean()) if len(speeds) else math.nan
    return {
        "alpha": float(alpha),
        "episodes": len(episodes),
        "mean_concept": mean,
        "concept_ci": [mean - half, mean + half],
        "successes": wins,
        "success_rate": wins / len(episodes) if episodes else math.nan,
        "success_ci": list(wilson_interval(wins, len(episodes))) if episodes else [math.nan] * 2,
        "scenes": len({e.get("scene") for e in episodes}),
    }


def check_dial(
    points: Sequence[dict[str, Any]],
    min_success: float = 0.9,
    span: tuple[float, float] = (0.5, 1.5),
) -> dict[str, Any]:
    """Is the dose-response a dial? Working range, monotonicity and span.

    The working range is the longest run of consecutive alphas (sorted) that contains alpha = 0
    and keeps ``success_rate >= min_success``. Speed is monotone over it when no step between
    neighbours goes against the overall direction (the sign of the end-to-end change) by more
    than the larger of the two points' speed-interval half-widths (a reversal inside the noise
    is not a reversal). The span is the working range's lowest and highest mean speed over the
    unsteered one; a dial spans ``span`` (0.5x-1.5x) with at least three points.

    Raises:
        ConfigError: No alpha = 0 point.
    """
    pts = sorted(points, key=lambda p: p["alpha"])
    zero = [i for i, p in enumerate(pts) if p["alpha"] == 0.0]
    if not zero:
        raise ConfigError("the dose-response has no alpha = 0 point", fix="include 0 in --alphas")
    i0 = zero[0]
    base = pts[i0]["mean_concept"]

    def held(p: dict[str, Any]) -> bool:
        return bool(p["success_rate"] >= min_success)

    lo = hi = i0
    if held(pts[i0]):
        while lo > 0 and held(pts[lo - 1]):
            lo -= 1
        while hi < len(pts) - 1 and held(pts[hi + 1]):
            hi += 1
    work = pts[lo : hi + 1] if held(pts[i0]) else []
    speeds = [p["mean_concept"] for p in work]
    sign = float(np.sign(speeds[-1] - speeds[0])) if len(work) >= 2 else 0.0
    reversals = []
    for a, b in itertools.pairwise(work):
        tol = max(
            (a["concept_ci"][1] - a["concept_ci"][0]) / 2,
            (b["concept_ci"][1] - b["concept_ci"][0]) / 2,
        )
        tol = 0.0 if not math.isfinite(tol) else tol
        if sign != 0 and sign * (b["mean_concept"] - a["mean_concept"]) < -tol:
            reversals.append([a["alpha"], b["alpha"]])
    monotone = len(work) >= 2 and sign != 0 and not reversals
    ratio = [min(speeds) / base, max(speeds) / base] if work and base > 0 else [math.nan, math.nan]
    spans = bool(work) and ratio[0] <= span[0] and ratio[1] >= span[1]
    return {
        "unsteered_value": base,
        "working_range": [work[0]["alpha"], work[-1]["alpha"]] if work else None,
        "points_in_range": len(work),
        "direction": sign,
        "monotone": bool(monotone),
        "reversals": reversals,
        "ratio_range": ratio,
        "spans_target": bool(spans),
        "is_dial": bool(monotone and spans and len(work) >= 3),
        "min_success": min_success,
        "target_span": list(span),
    }


def plot_dose_response(
    curves: Mapping[str, Sequence[dict[str, Any]]],
    path: Any,
    ylabel: str = "mean end-effector speed (m/s)",
) -> None:
    """Mean concept value (``ylabel``; with 95 % intervals) and success against alpha, one line
    per method."""
    from embodied.apps.plotting import plt, save_figure

    fig, (ax_v, ax_s) = plt.subplots(2, 1, figsize=(6.5, 6), sharex=True)
    for name, pts in curves.items():
        pts = sorted(pts, key=lambda p: p["alpha"])
        a = [p["alpha"] for p in pts]
        v = np.array([p["mean_concept"] for p in pts])
        ci = np.array([p["concept_ci"] for p in pts])
        ax_v.errorbar(a, v, yerr=[v - ci[:, 0], ci[:, 1] - v], marker="o", capsize=3, label=name)
        s = np.array([p["success_rate"] for p in pts])
        sci = np.array([p["success_ci"] for p in pts])
        ax_s.errorbar(a, 100 * s, yerr=[100 * (s - sci[:, 0]), 100 * (sci[:, 1] - s)],
                      marker="o", capsize=3, label=name)  # fmt: skip
    ax_v.set_ylabel(ylabel)
    ax_v.legend(fontsize=8)
    ax_v.grid(alpha=0.3)
    ax_s.set_ylabel("success (%)")
    ax_s.set_xlabel("steering strength alpha")
    ax_s.axhline(90, color="grey", ls="--", lw=0.8)
    ax_s.set_ylim(-5, 105)
    ax_s.grid(alpha=0.3)
    fig.suptitle("dose-response on tuning seeds (95 % intervals)")
    fig.tight_layout()
    save_figure(fig, path)


def scene_key(env: Env) -> str | None:
    """The current episode's scene (target and cube positions, mm) of a MuJoCo task env, or
    None where the env does not describe one; distinct keys are distinct scenes."""
    from sim.mujoco.env import as_mujoco_env

    try:
        task: Any = as_mujoco_env(env).task
    except Exception:  # not a MuJoCo task env: no scene description
        return None
    state = task.caption_state() if hasattr(task, "caption_state") else None
    if not state or "cubes" not in state:
        return None
    cubes = {c: [round(1000 * float(v)) for v in xyz[:2]] for c, xyz in state["cubes"].items()}
    return f"{state.get('target')}:{sorted(cubes.items())}"
