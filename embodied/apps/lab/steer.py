"""The CTRL-STEER experiment: open-loop vs closed-loop activation steering of a VLA.

Pipeline (``embodied lab steer experiment``, :func:`steer_experiment`):

1. Demonstrations: the scripted expert at three commanded speeds (slow / normal / fast), with
   the speed adverb in the instruction ("reach the red cube quickly"), recorded through
   :func:`embodied.loop.rollout` (camera frames + instruction + action).
2. Behaviour cloning of a tiny OpenVLA (same classes as the 7B model) on those demonstrations.
3. A speed direction: difference of means of residual-stream activations (middle layer,
   action-generating positions) between steps of fast and of slow demonstrations.
4. Tuning on seeds disjoint from training and evaluation: a fixed-alpha sweep gives the best
   fixed alpha* (closest mean speed to the setpoint) and the PID gains; the same number of
   rollouts tunes the constant of Häon et al. 2025's value-vector neurons
   (:func:`policies.openvla.steering.select_value_vector_neurons`); PPO trains on its own seeds.
5. Evaluation with the plain instruction on the evaluation seeds for each row: none, fixed
   alpha*, Häon, PID and PPO (RL) on the measured end-effector speed. Figures per row: success
   rate (Wilson 95% interval), tracking RMSE to the target speed (95% interval), overshoot,
   settling time; the sweeps; plots of speed and alpha_t and of success vs RMSE.

With ``--concept height`` (graded demonstrations only) the same pipeline varies, steers and
tracks the end-effector's cruise height (m) instead of its speed (``config_steer.STEER_CONCEPTS``).

The same functions run a real checkpoint (``--model openvla/openvla-7b``) on LIBERO with a
direction from a LIBERO dataset; only the tiny-model training is specific to the built-in task,
and it is the product's (``embodied train vla``, :mod:`embodied.apps.training.training_vla`).
"""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

import controllers
import policies
from controllers.analysis import steady_state_rmse, step_response, tracking_rmse
from controllers.rl import RLController, RLControllerConfig, SteeringEnv
from controllers.rl.training_rl import CONTROLLER_PPO, RLTrainSettings, train_rl_controller
from embodied.apps.lab.config_steer import (
    ARM_TAU_S,
    CONCEPT_UNITS,
    HEIGHT_CRUISE_RADIUS_M,
    HEIGHT_START_M,
    DialSettings,
    ExperimentSettings,
    SteerExperimentConfig,
    height_expert_kwargs,
    height_meta,
)
from embodied.apps.lab.stats import Z95, wilson_interval
from embodied.apps.lab.steer_dial import (
    check_dial,
    collect_graded_demonstrations,
    dose_point,
    episode_contrast,
    extract_direction,
    height_feedback_map,
    plot_dose_response,
    scene_key,
)
from embodied.apps.lab.steer_report import write_report
from embodied.apps.training.training_vla import (
    SPEED_LEVELS,
    Log,
    collect_speed_demonstrations,
    no_log,
    steer_env,
    train_tiny_on_env,
)
from embodied.concepts import make_concept
from embodied.contracts import Concept, Controller, Env, Policy
from embodied.datasets import Dataset
from embodied.errors import ConfigError
from embodied.io import write_json, write_text
from embodied.loop import Steering, rollout
from policies.openvla.loading_openvla import load_pretrained
from policies.openvla.modeling_openvla import OpenVLAModel
from policies.openvla.policy_openvla import (
    OpenVLAPolicy,
    env_preset,
    libero_unnorm_key,
    load_for_preset,
)
from policies.openvla.processor_openvla import OpenVLAProcessor, action_stats, normalize
from policies.openvla.steering import (
    NeuronCluster,
    SteeringDirection,
    ValueVectorHook,
    ValueVectorNeurons,
    collect_activations,
    load_intervention,
    mean_difference,
    select_neurons,
    select_value_vector_neurons,
)
from policies.openvla.training_openvla import BCSettings, DemonstrationSteps
from sim.mujoco.arm_reach import CUBE_HALF_M, TARGET_ABOVE_TOP_M

GRASP_Z_M = 2 * CUBE_HALF_M + TARGET_ABOVE_TOP_M
"""Height (m) of an arm_reach cube's grasp point above the table: the height expert's hover
heights are above it, its cruise heights (the measure) above the table."""


def check_disjoint_seeds(ranges: dict[str, tuple[int, int]]) -> None:
    """Refuse overlapping seed ranges (half-open ``[first, end)``; empty ranges never overlap).

    Raises:
        ConfigError: Two stages share a seed.
    """
    items = [(k, v) for k, v in ranges.items() if v[1] > v[0]]
    for i, (a, (a0, a1)) in enumerate(items):
        for b, (b0, b1) in items[i + 1 :]:
            if a0 < b1 and b0 < a1:
                raise ConfigError(
                    f"{a} seeds [{a0}, {a1}) overlap {b} seeds [{b0}, {b1})",
                    fix="move --seed / --tuning-seed / --rl-seed apart",
                )


def training_seed_range(config: SteerExperimentConfig, n_targets: int) -> tuple[int, int]:
    """Seeds of the demonstrations the tiny VLA and the direction come from: ``[0, n)``."""
    per_level = max(1, n_targets) * len(SPEED_LEVELS)
    eps = max(
        config.demonstration_episodes if config.model is None else 0, config.extraction_episodes
    )
    return (0, per_level * eps)


def model_training_seeds(model: str | None) -> tuple[int, int]:
    """``[first, end)`` of the demonstration seeds a local tiny-VLA checkpoint was trained on
    (its ``config.json`` training record), ``(0, 0)`` when unknown (a hub id, a released
    checkpoint, or an older one)."""
    if model is None or not (Path(model) / "config.json").is_file():
        return (0, 0)
    record = json.loads((Path(model) / "config.json").read_text()).get("training") or {}
    seeds = record.get("demonstration_seeds")
    return (int(seeds[0]), int(seeds[1])) if seeds else (0, 0)


def experiment_training_seeds(cfg: SteerExperimentConfig, n_targets: int) -> tuple[int, int]:
    """The seeds the VLA and its direction come from: :func:`training_seed_range` together
    with those of ``cfg.model``'s own demonstrations (one range covering both)."""
    ranges = [r for r in (training_seed_range(cfg, n_targets), model_training_seeds(cfg.model))
              if r[1] > r[0]]  # fmt: skip
    if not ranges:
        return (0, 0)
    return (min(r[0] for r in ranges), max(r[1] for r in ranges))


# ---------------------------------------------------------------------------------------------
# demonstrations
# ---------------------------------------------------------------------------------------------


def demonstrations_from_dataset(
    path: str, image_key: str, obs_key_map: dict[str, str] | None = None
) -> DemonstrationSteps:
    """Demonstration steps from a recorded dataset (``embodied collect`` shards or a
    robomimic/LIBERO file).

    The per-step concept is the commanded translational speed ``|action[:3]|``.
    """
    ds = Dataset(path, obs_key_map=obs_key_map)
    images, instr, actions, episode = [], [], [], []
    for e, ep in enumerate(ds):
        if image_key not in ep.obs:
            raise ConfigError(
                f"{ep.source} has no {image_key!r}; keys {sorted(ep.obs)}",
                fix="pass --image-key or an obs key map",
            )
        images.append(ep.obs[image_key])
        actions.append(ep.actions)
        instr += [ep.instruction] * len(ep)
        episode += [e] * len(ep)
    acts = np.concatenate(actions)
    return DemonstrationSteps(
        np.concatenate(images),
        instr,
        acts,
        np.asarray(episode),
        np.linalg.norm(acts[:, :3], axis=1),
        {"dataset": str(path)},
    )


# ---------------------------------------------------------------------------------------------
# direction extraction
# ---------------------------------------------------------------------------------------------


def extract_speed_intervention(
    model: OpenVLAModel,
    proc: OpenVLAProcessor,
    cfg: SteerExperimentConfig,
    env: Env | None = None,
    reset: dict[str, Any] | None = None,
    targets: Sequence[str] = (),
    demonstrations: DemonstrationSteps | None = None,
    log: Log = no_log,
) -> SteeringDirection | NeuronCluster:
    """The speed direction or neuron cluster of ``cfg``, extracted from ``cfg.dataset``, the
    given ``demonstrations``, or fresh expert demonstrations on ``env`` (mujoco envs).

    Raises:
        ConfigError: no demonstrations to extract from (a non-mujoco env without a dataset).
    """
    if cfg.site != "output":
        raise ConfigError(
            f"site {cfg.site!r}: directions from recorded demonstrations steer a layer's output",
            fix="use --site output (input needs graded demonstrations: --speed-labels continuum)",
        )
    if cfg.dataset is not None:
        demonstrations = demonstrations_from_dataset(str(cfg.dataset), cfg.image_key)
    elif demonstrations is None:
        if env is None or not cfg.env_id.startswith("mujoco:"):
            raise ConfigError(
                f"no demonstrations to extract a direction for {cfg.env_id!r}",
                fix="pass --direction or --dataset (e.g. a LIBERO hdf5)",
            )
        demonstrations = collect_speed_demonstrations(
            env, cfg.extraction_episodes, 0, None, reset, targets, log
        )
    return extract_intervention(
        model,
        proc,
        demonstrations,
        cfg.layer,
        cfg.kind,
        neurons=cfg.neurons,
        unnorm_key=cfg.unnorm_key,
        positions=cfg.positions,
    )


def extract_intervention(
    model: OpenVLAModel,
    processor: OpenVLAProcessor,
    demonstrations: DemonstrationSteps,
    layer: int | None = None,
    kind: str = "direction",
    concept: str = "ee_speed",
    max_per_set: int = 400,
    neurons: int = 16,
    unnorm_key: str | None = None,
    seed: int = 0,
    positions: str = "last",
) -> SteeringDirection | NeuronCluster:
    """Difference-of-means direction (or neuron cluster) between fast and slow demonstration steps.

    Activations are averaged over ``positions``: ``"last"`` = the last prompt token (which
    generates the first action token; its input differs between the sets only through what
    it attends to); ``"action"`` = the positions generating all action tokens (teacher-forced
    demonstration action tokens as inputs); ``"text"`` = every prompt token after the image patches.
    """
    if positions not in ("last", "text", "action"):
        raise ConfigError(
            f"positions {positions!r}: the fast-vs-slow contrast of recorded demonstrations "
            "takes last, text or action",
            fix="use --positions last (word needs graded demonstrations: --speed-labels continuum)",
        )
    layer = (len(model.decoder_layers) - 1) // 2 if layer is None else int(layer)
    # thirds of *episodes* by speed: thirds of steps put plain steps in the fast set (slow
    # episodes are longer)
    pos, neg = episode_contrast(demonstrations.concept, demonstrations.episode)
    rng = np.random.default_rng(seed)
    stats = action_stats(model.config, unnorm_key)
    acts = {}
    site = "residual" if kind == "direction" else "mlp"
    if kind not in ("direction", "neurons"):
        raise ConfigError(f"unknown intervention kind {kind!r}; use 'direction' or 'neurons'")
    for name, mask in (("positive", pos), ("negative", neg)):
        idx = np.flatnonzero(mask)
        idx = rng.choice(idx, size=min(max_per_set, len(idx)), replace=False)
        tokens = processor.actions.encode(normalize(demonstrations.actions[idx], stats))
        d = tokens.shape[1]
        suffix = tokens[:, :-1].tolist() if positions == "action" else None
        ids, am = processor.encode_prompts([demonstrations.instructions[i] for i in idx], suffix)
        pv = processor.images(demonstrations.images[idx]).to(model.dtype)
        # with left padding, the shortest row bounds the common text suffix length
        n_text = {"text": int(am.sum(1).min()) - 1, "action": d, "last": 1}[positions]
        acts[name] = collect_activations(model, pv, ids, am, layer, n_last=n_text, site=site)
    meta = {
        "contrast": "fastest vs slowest third of demonstration episodes",
        "concept_positive_mean": float(demonstrations.concept[pos].mean()),
        "concept_negative_mean": float(demonstrations.concept[neg].mean()),
        "model": model.config.name,
        "site": site,
        "positions": positions,
        **{k: v for k, v in demonstrations.meta.items() if isinstance(v, (str, int, float))},
    }
    if kind == "direction":
        return mean_difference(acts["positive"], acts["negative"], layer, concept, meta)
    return select_neurons(acts["positive"], acts["negative"], layer, neurons, concept, meta)


# ---------------------------------------------------------------------------------------------
# evaluation
# ---------------------------------------------------------------------------------------------


def measure(settings: ExperimentSettings) -> Concept:
    """The concept signal of ``settings.concept``: the EMA-filtered end-effector speed (m/s)
    or the fingertip height (m) away from the target (NaN within ``HEIGHT_CRUISE_RADIUS_M``)."""
    if settings.concept == "height":
        return make_concept("ee_height", cruise_radius_m=HEIGHT_CRUISE_RADIUS_M)
    return make_concept("ee_speed", filter_tau_s=settings.concept_tau_s)


def concept_reset(concept: str) -> dict[str, Any]:
    """Reset options a concept's episodes add to the layout's (height: the start beside the
    cubes, :data:`HEIGHT_START_M`)."""
    return {"start": list(HEIGHT_START_M)} if concept == "height" else {}


def graded_kwargs(cfg: SteerExperimentConfig) -> dict[str, Any]:
    """:func:`collect_graded_demonstrations`' keyword arguments from ``cfg`` beyond the labels,
    range and seeds."""
    return {
        "unnamed_fraction": cfg.unnamed_fraction,
        "concept": cfg.concept,
        "height_range": cfg.height_range,
        "height_speed": cfg.height_speed,
        "height_start_range": cfg.height_start_range,
        "height_descents": cfg.height_descents,
    }


def run_episodes(
    env: Env,
    policy: Policy,
    controller: Controller | None,
    settings: ExperimentSettings,
    n: int,
    label: str,
    log: Log = no_log,
    first_seed: int | None = None,
    setpoint: Callable[[float], float] | None = None,
) -> dict[str, Any]:
    """``n`` steered episodes on seeds ``first_seed`` (default ``settings.seed``) onwards.

    ``setpoint`` (a function of episode time, s) replaces ``settings.setpoint`` for a setpoint
    change; step-response figures are then not computed.
    """
    first = settings.seed if first_seed is None else int(first_seed)
    concept = measure(settings)
    steering = Steering(
        concept, controller, knob="alpha",
        setpoint=settings.setpoint if setpoint is None else setpoint,
        rest=settings.knob_rest(),
    )  # fmt: skip
    episodes = []
    for k in range(n):
        if hasattr(policy, "reset_knobs"):
            policy.reset_knobs()
        ep = rollout(
            env,
            policy,
            steering=steering,
            seed=first + k,
            reset_options=settings.reset_options or None,
            record_images=False,
        )
        t = np.arange(len(ep)) / env.control_rate_hz
        y = ep.measurements
        row: dict[str, Any] = {
            "seed": first + k,
            "scene": scene_key(env),
            "success": bool(ep.success),
            "steps": len(ep),
            "rmse": tracking_rmse(y, ep.setpoints, skip=1),
            "rmse_steady": steady_state_rmse(
                y, ep.setpoints, env.control_rate_hz, settings.steady_transient_s
            ),
            # the height is NaN over the target (not the concept's): means are over the rest
            "mean_concept": float(y[1:][np.isfinite(y[1:])].mean())
            if np.isfinite(y[1:]).any()
            else math.nan,
            "measured": y.tolist(),
            "setpoints": np.asarray(ep.setpoints, dtype=np.float64).tolist(),
            "alpha": ep.knobs["alpha"][:, 0].tolist() if "alpha" in ep.knobs else [0.0] * len(ep),
        }
        try:
            if setpoint is not None:  # a setpoint change: no single step to measure
                raise ConfigError("time-varying setpoint")
            # speed rises from rest; the height steps from wherever the arm starts
            initial = 0.0 if settings.concept == "speed" else None
            # a start already inside the settling band makes no step to measure
            sr = step_response(
                t,
                y,
                settings.setpoint,
                initial=initial,
                band=settings.band,
                min_step=settings.band * abs(settings.setpoint),
            )
            row["overshoot_pct"], row["settling_time_s"] = sr.overshoot_pct, sr.settling_time_s
        except ConfigError:
            row["overshoot_pct"], row["settling_time_s"] = math.nan, math.nan
        episodes.append(row)
    summary = summarize(episodes)
    u = CONCEPT_UNITS[settings.concept]
    log(
        f"{label:>14s}: success {summary['success_rate']:.2f} "
        f"[{summary['success_ci'][0]:.2f}, {summary['success_ci'][1]:.2f}]  "
        f"rmse {summary['rmse']:.4f} {u}  {settings.concept} {summary['mean_concept']:.3f} {u}  "
        f"overshoot {summary['overshoot_pct']:.1f} %  settle {summary['settling_time_s']:.2f} s "
        f"({summary['settled_fraction']:.2f} settled)"
    )
    return {"label": label, "summary": summary, "episodes": episodes}


def summarize(episodes: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over episodes (settling time over the episodes that settle), the Wilson 95%
    interval of the success rate and a normal 95% interval of the mean RMSE."""

    def finite(key: str) -> np.ndarray:
        vals = np.array([e.get(key, math.nan) for e in episodes], dtype=np.float64)
        return vals[np.isfinite(vals)]

    def mean(key: str) -> float:
        vals = finite(key)
        return float(vals.mean()) if vals.size else math.nan

    settled = [e for e in episodes if np.isfinite(e["settling_time_s"])]
    wins = sum(bool(e["success"]) for e in episodes)

    def interval(key: str) -> list[float]:
        vals = finite(key)
        centre = float(vals.mean()) if vals.size else math.nan
        half = float(Z95 * vals.std(ddof=1) / math.sqrt(vals.size)) if vals.size > 1 else math.nan
        return [centre - half, centre + half]

    return {
        "episodes": len(episodes),
        "successes": wins,
        "success_rate": wins / len(episodes),
        "success_ci": list(wilson_interval(wins, len(episodes))),
        "rmse": mean("rmse"),
        "rmse_ci": interval("rmse"),
        "rmse_steady": mean("rmse_steady"),
        "rmse_steady_ci": interval("rmse_steady"),
        "mean_concept": mean("mean_concept"),
        "overshoot_pct": mean("overshoot_pct"),
        "settling_time_s": mean("settling_time_s"),
        "settled_fraction": len(settled) / len(episodes),
        "mean_steps": mean("steps"),
        "distinct_scenes": len({e.get("scene", e.get("seed")) for e in episodes}),
    }


def best_fixed(
    sweep: list[dict[str, Any]],
    setpoint: float,
    key: str = "alpha",
    min_success: float | None = None,
) -> float:
    """The swept setting whose closed-loop mean speed is closest to ``setpoint``.

    ``sweep`` holds the tuning rollouts only (``{key: value, "summary": {...}}``); ties go to
    the smaller ``|value|``. With ``min_success`` only settings whose tuning success rate is at
    least that are candidates (success as a constraint: a setting that tracks by stalling the
    arm is not a choice); when none keeps it, the most successful setting is taken.

    Raises:
        ConfigError: No sweep point has a finite mean speed.
    """
    finite = [r for r in sweep if np.isfinite(r["summary"]["mean_concept"])]
    if not finite:
        raise ConfigError(
            f"no tuning sweep point to choose the best fixed {key} from",
            fix="run the sweep (--sweep-episodes > 0 and --sweep-alphas)",
        )
    if min_success is not None:
        kept = [r for r in finite if r["summary"].get("success_rate", 1.0) >= min_success]
        if not kept:
            top = max(r["summary"].get("success_rate", 0.0) for r in finite)
            kept = [r for r in finite if r["summary"].get("success_rate", 0.0) == top]
        finite = kept
    pts = [(abs(r["summary"]["mean_concept"] - setpoint), abs(r[key]), r[key]) for r in finite]
    return float(min(pts)[2])


def working_range(sweep: list[dict[str, Any]], min_success: float | None) -> list[dict[str, Any]]:
    """The sweep points of the contiguous alpha range around alpha = 0 that keep ``min_success``
    (all points when ``min_success`` is None), sorted by alpha; empty without an alpha = 0 point
    that keeps it."""
    pts = sorted(
        (r for r in sweep if np.isfinite(r["summary"]["mean_concept"])), key=lambda r: r["alpha"]
    )
    if min_success is None:
        return pts

    def held(r: dict[str, Any]) -> bool:
        return bool(r["summary"].get("success_rate", 1.0) >= min_success)

    zero = [i for i, r in enumerate(pts) if r["alpha"] == 0.0]
    if not zero or not held(pts[zero[0]]):
        return []
    lo = hi = zero[0]
    while lo > 0 and held(pts[lo - 1]):
        lo -= 1
    while hi < len(pts) - 1 and held(pts[hi + 1]):
        hi += 1
    return pts[lo : hi + 1]


def pid_from_sweep(
    sweep: list[dict[str, Any]], settings: ExperimentSettings, min_success: float | None = None
) -> dict[str, Any]:
    """PI gains from the fixed-alpha sweep: static gain K = d speed / d alpha.

    K is the slope of a straight line through the sweep points of ``settings.pid_fit``:
    ``working_range`` (:func:`working_range`: where steering keeps the success floor, so the
    controller is tuned on the part of the dial it should use) or ``half_range`` (every point
    with ``|alpha| <= alpha_limit / 2``, the earlier rule, which fits a line through a cliff).
    IMC tuning of a first-order plant (gain K, time constant ~0.2 s) with closed-loop time
    constant 1 s: ``kp = T / (|K| lambda)``, ``ki = 1 / (|K| lambda)``, and the PID's
    ``direction`` the sign of K (a dial that slows the arm for positive alpha acts reversed).

    ``settings.pid_feedforward == "static"`` also inverts the same line ``v = v0 + K alpha``
    as the PID's setpoint feedforward (``bias = -v0 / K``, ``kff = 1 / K``): each setpoint
    starts from the alpha the dial's line gives it, and feedback trims the rest. ``sweep``
    inverts the fitted points themselves instead of the line (``PIDConfig.feedforward_table``:
    linear between neighbouring points, held at the ends), so a dial that bends near its ends
    starts each setpoint from the alpha measured for it; when the points' speeds are not
    strictly monotone in alpha it falls back to the line (``feedforward`` in the result says
    which was used). ``none`` (the earlier rule) starts every setpoint from alpha = 0.

    ``settings.pid_reference_tau_s > 0`` makes it two-degree-of-freedom
    (``PIDConfig.setpoint_tau_s``): the feedback acts on the rise expected of the arm (a
    first-order filter of the setpoint from the first measurement), not on the error of an arm
    that has to accelerate from rest whatever alpha is, so the integrator does not wind up
    during the rise; the feedforward still acts on the setpoint.
    """
    if settings.pid_fit == "working_range":
        rows = working_range(sweep, min_success)
    else:
        rows = [r for r in sweep if abs(r["alpha"]) <= settings.alpha_limit / 2]
    pts = sorted(
        (r["alpha"], r["summary"]["mean_concept"])
        for r in rows
        if np.isfinite(r["summary"]["mean_concept"])
    )
    gain, offset = math.nan, math.nan
    if len(pts) >= 2:
        a, v = np.array(pts).T
        gain, offset = (float(x) for x in np.polyfit(a, v, 1))
    if not np.isfinite(gain) or abs(gain) <= 1e-3:
        gain, offset = 0.05, math.nan  # per unit alpha (m/s or m): a conservative fallback
    lam, tau = 1.0, ARM_TAU_S  # closed-loop and arm time constants (s)
    feedforward: dict[str, Any] = {}
    used = "none"
    if settings.pid_feedforward == "sweep" and len(pts) >= 2:
        alphas, speeds = (np.array(x) for x in zip(*pts, strict=True))
        steps = np.diff(speeds)
        if np.all(steps > 0) or np.all(steps < 0):
            order = np.argsort(speeds)
            feedforward = {
                "feedforward_table": [[float(speeds[i]), float(alphas[i])] for i in order]
            }
            used = "sweep"
    if not feedforward and settings.pid_feedforward != "none" and np.isfinite(offset):
        feedforward = {"bias": -offset / gain, "kff": 1.0 / gain}
        used = "static"
    if settings.pid_reference_tau_s > 0:
        feedforward["setpoint_tau_s"] = settings.pid_reference_tau_s
    return {
        **feedforward,
        "kp": tau / (abs(gain) * lam),
        "ki": 1.0 / (abs(gain) * lam),
        "kd": 0.0,
        "direction": 1 if gain > 0 else -1,
        "output_min": -settings.alpha_limit,
        "output_max": settings.alpha_limit,
        "rate_limit": 20.0,
        "anti_windup": "back_calculation",
        "static_gain": gain,
        "fit": settings.pid_fit,
        "fit_alphas": [p[0] for p in pts],
        "feedforward": used,
    }


class SeededSteeringEnv(SteeringEnv):
    """:class:`SteeringEnv` whose inner episodes take seeds ``first, first+1, ...`` (cycling
    within ``[first, end)``) instead of random ones, so PPO's training episodes are disjoint
    from the tuning and evaluation seeds."""

    def __init__(self, *args: Any, seeds: tuple[int, int], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seed_range = (int(seeds[0]), max(int(seeds[1]), int(seeds[0]) + 1))
        self._next_seed = self.seed_range[0]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """As :meth:`SteeringEnv.reset`, with the next seed of the range as ``inner_seed``."""
        options = dict(options or {})
        if "inner_seed" not in options:
            options["inner_seed"] = self._next_seed
            self._next_seed += 1
            if self._next_seed >= self.seed_range[1]:
                self._next_seed = self.seed_range[0]
        return super().reset(seed=seed, options=options)


def rl_setpoint_range(
    settings: ExperimentSettings,
    sweep: list[dict[str, Any]] | None = None,
    min_success: float | None = None,
) -> tuple[float, float]:
    """The setpoints PPO trains on, ``settings.rl_setpoint_range`` (m/s or m).

    Raises:
        ConfigError: ``working_range`` without a working range (no tuning sweep, or its
            alpha = 0 point misses the success floor).
    """
    targets = settings.targets()
    if settings.rl_setpoint_range == "targets":
        return min(targets) * 0.7, max(targets) * 1.3
    held = working_range(sweep or [], min_success)
    if not held:
        raise ConfigError(
            f"rl_setpoint_range='working_range' needs the tuning sweep's working range, and "
            f"this run has none (sweep points: {len(sweep or [])})",
            fix="run the sweep (--sweep-episodes > 0 with alpha 0 in --sweep-alphas), or pass "
            "--rl-setpoint-range targets",
        )
    values = [float(r["summary"]["mean_concept"]) for r in held]
    return min(min(values), min(targets)), max(max(values), max(targets))


def train_rl(
    env: Env,
    policy: Policy,
    settings: ExperimentSettings,
    out: Path,
    log: Log = no_log,
    setpoints: tuple[float, float] | None = None,
) -> Controller:
    """PPO controller trained on steered rollouts of the frozen policy (seeds ``rl_seed`` on),
    on setpoints drawn from ``setpoints`` (low, high; default :func:`rl_setpoint_range`
    without a sweep, which only the ``targets`` rule can draw)."""
    low, high = setpoints or rl_setpoint_range(settings)
    # the knob's step and its penalty scale with its range (the same as before at the default
    # alpha_limit 4), so a direction with another unit gets the same controller
    knob_scale = settings.alpha_limit / 4.0
    cfg = RLControllerConfig(
        output_min=-settings.alpha_limit,
        output_max=settings.alpha_limit,
        max_delta=0.5 * knob_scale,
        error_scale=0.05,
        horizon_steps=env.max_episode_steps,
        setpoint_low=low,
        setpoint_high=high,
        error_weight=settings.rl_error_weight,
        lambda_delta=0.05 / knob_scale,
        beta_success=2.0,
        observe_setpoint=settings.rl_observe_setpoint,
    )
    senv = SeededSteeringEnv(
        env,
        policy,
        measure(settings),
        cfg,
        reset_options=settings.reset_options or None,
        seeds=settings.seed_ranges()["rl_training"],
        rest=settings.knob_rest(),
    )
    training = RLTrainSettings(
        total_timesteps=settings.rl_timesteps,
        ppo=replace(CONTROLLER_PPO, n_epochs=5),
        log_std_init=settings.rl_log_std_init,
        seed=settings.rl_train_seed,
    )
    controller, _ = train_rl_controller(senv, training, save_to=out)
    if hasattr(senv, "close"):
        senv.close()
    log(f"RL controller: {controller.meta if hasattr(controller, 'meta') else ''}")
    return controller


def load_rl(settings: ExperimentSettings) -> tuple[Controller, int]:
    """The RL controller of ``settings.rl_controller`` (an earlier run's ``rl_controller``
    folder) and the PPO timesteps it was trained for.

    Raises:
        ConfigError: its output limits are not ``+/- alpha_limit`` (the knob range every other
            row of the experiment is held to).
    """
    path = Path(str(settings.rl_controller))
    controller = RLController.from_pretrained(path)
    c = controller.config
    if (c.output_min, c.output_max) != (-settings.alpha_limit, settings.alpha_limit):
        raise ConfigError(
            f"rl_controller={str(path)!r} steers alpha in [{c.output_min:g}, {c.output_max:g}], "
            f"not +/- alpha_limit={settings.alpha_limit:g}",
            fix=f"pass --alpha-limit {c.output_max:g}, or train one (omit --rl-controller)",
        )
    return controller, int(controller.meta.get("total_timesteps", 0))


def run_experiment(
    env: Env,
    policy: Policy,
    settings: ExperimentSettings,
    out: Path,
    log: Log = no_log,
    extra: dict[str, Any] | None = None,
    training_seeds: tuple[int, int] = (0, 0),
    haeon: ValueVectorHook | None = None,
) -> dict[str, Any]:
    """Tune on the tuning seeds, then evaluate every row on the evaluation seeds.

    Tuning (``settings.sweep_episodes`` rollouts per point, seeds ``tuning_seed`` on): the
    fixed-alpha sweep gives alpha* (:func:`best_fixed`) and the PID gains; the same number of
    rollouts per Häon constant gives its constant. Rows: none, fixed alpha*, Häon (when
    ``haeon`` is given), PID, RL (when ``rl_timesteps > 0``). Writes results.json, results.md
    and the plots.

    Raises:
        ConfigError: Overlapping seed ranges (:func:`check_disjoint_seeds`), or no sweep.
    """
    seeds = settings.seed_ranges(training_seeds)
    check_disjoint_seeds(seeds)
    grad = torch.is_grad_enabled()
    try:
        torch.set_grad_enabled(False)
        return _tune_and_evaluate(env, policy, settings, out, log, extra, seeds, haeon)
    finally:
        torch.set_grad_enabled(grad)


def _tune_and_evaluate(
    env: Env,
    policy: Policy,
    settings: ExperimentSettings,
    out: Path,
    log: Log,
    extra: dict[str, Any] | None,
    seeds: dict[str, tuple[int, int]],
    haeon: ValueVectorHook | None,
) -> dict[str, Any]:
    """Tune every controller on the tuning seeds, train RL, evaluate every row, report."""
    timing: dict[str, float] = {}
    t0 = time.perf_counter()
    tuning = _tune(env, policy, settings, log, haeon)
    timing["tuning_s"] = time.perf_counter() - t0
    pid_cfg = dict(settings.pid) or pid_from_sweep(tuning.sweep, settings, tuning.min_success)
    static_gain = pid_cfg.pop("static_gain", None)
    pid_fit = {k: pid_cfg.pop(k) for k in ("fit", "fit_alphas", "feedforward") if k in pid_cfg}
    rl, rl_steps = None, 0
    if settings.rl_controller is not None:
        rl, rl_steps = load_rl(settings)
        log(f"RL controller from {settings.rl_controller} ({rl_steps} PPO timesteps)")
    elif settings.rl_timesteps > 0:
        t1 = time.perf_counter()
        torch.set_grad_enabled(True)
        rl_range = rl_setpoint_range(settings, tuning.sweep, tuning.min_success)
        log(f"RL setpoints: {rl_range[0]:.4g}-{rl_range[1]:.4g} ({settings.rl_setpoint_range})")
        rl = train_rl(env, policy, settings, out / "rl_controller", log, rl_range)
        torch.set_grad_enabled(False)
        timing["rl_training_s"] = time.perf_counter() - t1
        rl_steps = settings.rl_timesteps
    t2 = time.perf_counter()
    results = _evaluate_rows(env, policy, settings, log, haeon, tuning, pid_cfg, rl, rl_steps)
    timing["evaluation_s"] = time.perf_counter() - t2
    n_tune = settings.sweep_episodes
    targets = settings.targets()
    report = {
        "settings": asdict(settings),
        "seeds": {k: list(v) for k, v in seeds.items()},
        "seeds_disjoint": True,
        "budgets": {
            "fixed_alpha_tuning_rollouts": n_tune * len(tuning.sweep),
            "haeon_tuning_rollouts": n_tune * len(tuning.haeon_sweep),
            "pid_tuning_rollouts": n_tune * len(tuning.sweep),
            "rl_training_timesteps": rl_steps,
            "evaluation_episodes_per_row": settings.episodes,
        },
        "alpha_star": tuning.alpha_stars[targets[0]],
        "alpha_stars": {f"{sp:g}": a for sp, a in tuning.alpha_stars.items()},
        "haeon_coef_stars": {f"{sp:g}": c for sp, c in tuning.coef_stars.items()},
        "alpha_star_min_success": tuning.min_success,
        "pid_fit": pid_fit,
        "haeon_coef_star": tuning.coef_stars.get(targets[0], math.nan),
        "haeon": (
            {"neurons": haeon.intervention.neurons.tolist(), "meta": haeon.intervention.meta}
            if haeon is not None
            else None
        ),
        "pid": pid_cfg,
        # the controller the RL rows ran, as it was saved (a loaded one's observation may
        # differ from this run's rl_observe_setpoint setting)
        "rl_controller": (
            {
                "config": rl.config.to_dict(),
                "meta": rl.meta,
                "loaded_from": None
                if settings.rl_controller is None
                else str(settings.rl_controller),
            }
            if isinstance(rl, RLController)
            else None
        ),
        "static_gain_per_alpha": static_gain,  # concept units (m/s or m) per unit alpha
        "sweep_setpoint": targets[0],  # the sweep rows' RMSE and step figures are against it
        "sweep": [{"alpha": r["alpha"], **r["summary"]} for r in tuning.sweep],
        "haeon_sweep": [{"coef": r["coef"], **r["summary"]} for r in tuning.haeon_sweep],
        "rows": [_table_row(r) for r in results],
        "traces": {r["label"]: r["episodes"] for r in results},
        "timing": timing,
        **(extra or {}),
    }
    write_report(report, out, env.control_rate_hz)
    return report


@dataclass
class _Tuning:
    """What the tuning seeds chose: the fixed-alpha and Häon sweeps and their best points."""

    sweep: list[dict[str, Any]]
    """One result per fixed alpha (``alpha`` added)."""
    haeon_sweep: list[dict[str, Any]]
    """One result per Häon constant (``coef`` added); empty without Häon."""
    min_success: float | None
    """The success rate a fixed point must keep to be chosen (None: no constraint)."""
    alpha_stars: dict[float, float]
    """Setpoint (m/s or m) -> best fixed alpha."""
    coef_stars: dict[float, float]
    """Setpoint (m/s or m) -> best Häon constant; empty without Häon."""


def _tune(
    env: Env,
    policy: Policy,
    settings: ExperimentSettings,
    log: Log,
    haeon: ValueVectorHook | None,
) -> _Tuning:
    """Sweep fixed alphas (and Häon constants) on the tuning seeds; choose each setpoint's best.

    The choice reads each point's mean measure only; the RMSE and step figures it logs are
    against the first setpoint (:meth:`ExperimentSettings.targets`).
    """
    targets = settings.targets()
    first = replace(settings, setpoint=targets[0])

    def tune(label: str, controller: Controller | None) -> dict[str, Any]:
        return run_episodes(
            env,
            policy,
            controller,
            first,
            settings.sweep_episodes,
            label,
            log,
            first_seed=settings.tuning_seed,
        )

    sweep = []
    for a in settings.sweep_alphas if settings.sweep_episodes > 0 else ():
        r = tune(f"tune a={a:g}", controllers.make("fixed", value=a))
        r["alpha"] = a
        sweep.append(r)
    unsteered = [r for r in sweep if r["alpha"] == 0.0]
    min_success = (
        settings.min_success_ratio * unsteered[0]["summary"]["success_rate"]
        if unsteered and settings.min_success_ratio > 0
        else None
    )
    alpha_stars = {sp: best_fixed(sweep, sp, min_success=min_success) for sp in targets}
    haeon_sweep = []
    coef_stars: dict[float, float] = {}
    if haeon is not None and settings.haeon_coefs and settings.sweep_episodes > 0:
        for c in settings.haeon_coefs:
            haeon.coef = c
            with haeon:
                r = tune(f"tune haeon c={c:g}", None)
            r["coef"] = c
            haeon_sweep.append(r)
        coef_stars = {
            sp: best_fixed(haeon_sweep, sp, key="coef", min_success=min_success) for sp in targets
        }
    return _Tuning(sweep, haeon_sweep, min_success, alpha_stars, coef_stars)


def _evaluate_rows(
    env: Env,
    policy: Policy,
    settings: ExperimentSettings,
    log: Log,
    haeon: ValueVectorHook | None,
    tuning: _Tuning,
    pid_cfg: dict[str, Any],
    rl: Controller | None,
    rl_steps: int,
) -> list[dict[str, Any]]:
    """Every controller row on the evaluation seeds: per setpoint none, fixed alpha*, Häon,
    PID and RL, then the setpoint change (PID, RL) when there are two setpoints or more."""

    def evaluate(
        label: str, controller: Controller | None, sp: float, change: Any = None
    ) -> dict[str, Any]:
        at = settings if sp == settings.setpoint else replace(settings, setpoint=sp)
        kwargs = {} if change is None else {"setpoint": change}
        r = run_episodes(env, policy, controller, at, settings.episodes, label, log, **kwargs)
        r["setpoint"] = sp
        return r

    targets = settings.targets()
    results = []
    for sp in targets:
        tag = "" if len(targets) == 1 else f"sp={sp:g} "
        a_sp = tuning.alpha_stars[sp]
        reference = _reference_row(env, settings, sp, tag, log)
        if reference is not None:
            results.append(reference)
        results.append(evaluate(f"{tag}none", None, sp))
        results.append(
            evaluate(f"{tag}fixed alpha*={a_sp:g}", controllers.make("fixed", value=a_sp), sp)
        )
        if tuning.haeon_sweep and haeon is not None:
            haeon.coef = tuning.coef_stars[sp]
            with haeon:
                results.append(evaluate(f"{tag}haeon c*={tuning.coef_stars[sp]:g}", None, sp))
        results.append(evaluate(f"{tag}pid", controllers.make("pid", **pid_cfg), sp))
        if rl is not None:
            results.append(evaluate(f"{tag}rl (ppo, {rl_steps} steps)", rl, sp))
    if settings.setpoint_change_s > 0 and len(targets) >= 2:
        lo, hi, t_change = min(targets), max(targets), settings.setpoint_change_s

        def change(t_s: float) -> float:
            return lo if t_s < t_change else hi

        tag = f"{lo:g}->{hi:g} {CONCEPT_UNITS[settings.concept]} at {t_change:g} s"
        results.append(evaluate(f"pid, {tag}", controllers.make("pid", **pid_cfg), hi, change))
        if rl is not None:
            results.append(evaluate(f"rl, {tag}", rl, hi, change))
    return results


def _table_row(result: dict[str, Any]) -> dict[str, Any]:
    """A report row of one evaluated controller (what results.md tabulates)."""
    return {
        "controller": result["label"],
        "setpoint": result["setpoint"],
        **({"reference": True} if result.get("reference") else {}),
        **result["summary"],
    }


def _expert_at(env: Env, settings: ExperimentSettings, sp: float) -> Policy | None:
    """The env's scripted expert driving at setpoint ``sp`` (speed: its cruise speed, m/s;
    height: its cruise height, m, with ``settings.reference_expert``'s other kwargs), or None
    when the env has none."""
    if not callable(getattr(getattr(env, "unwrapped", env), "expert", None)):
        return None
    if settings.concept == "height":
        hover = sp - GRASP_Z_M  # the expert's hover height is above the target's grasp point
        return policies.load(
            "expert", env=env, **{**settings.reference_expert, "hover_range": (hover, hover)}
        )
    return policies.load("expert", env=env, **{**settings.reference_expert, "speed": sp})


def _run_reference(
    env: Env,
    expert: Policy,
    settings: ExperimentSettings,
    sp: float,
    label: str,
    log: Log,
) -> dict[str, Any]:
    """The expert-at-setpoint row: same evaluation seeds, filter and figures as every row."""
    at = settings if sp == settings.setpoint else replace(settings, setpoint=sp)
    r = run_episodes(env, expert, None, at, settings.episodes, label, log)
    r["setpoint"] = sp
    r["reference"] = True
    return r


def _reference_row(
    env: Env, settings: ExperimentSettings, sp: float, tag: str, log: Log
) -> dict[str, Any] | None:
    """The reference row of setpoint ``sp`` (label prefixed by ``tag``), or None when the
    settings ask for none or the env has no scripted expert."""
    expert = _expert_at(env, settings, sp) if settings.expert_reference else None
    if expert is None:
        return None
    return _run_reference(env, expert, settings, sp, f"{tag}expert at setpoint", log)


def rescore(
    report: dict[str, Any],
    rate_hz: float,
    transient_s: float,
    env: Env | None = None,
    log: Log = no_log,
) -> dict[str, Any]:
    """A finished experiment's report with the steady-state RMSE recomputed from its traces.

    Nothing is rolled out again for the controller rows: each episode's trace (speed and
    setpoint per step) gives its :func:`~controllers.analysis.steady_state_rmse` and every row
    is summarised anew. With ``env`` and no reference rows yet, the expert-at-setpoint rows
    are added on the report's own evaluation seeds (:func:`_run_reference`).

    Args:
        report: ``results.json`` of :func:`run_experiment` (left unchanged).
        rate_hz: The env's control rate (Hz).
        transient_s: Time left out after the start and after each setpoint change (s).
        env: The experiment's env (for the reference rows); None: no reference rows added.
        log: Progress sink.
    """
    out = copy.deepcopy(report)
    known = {f.name for f in fields(ExperimentSettings)}
    values = {k: v for k, v in out["settings"].items() if k in known}
    values["steady_transient_s"] = transient_s
    settings = ExperimentSettings(**values)
    out["settings"] = asdict(settings)
    rows = {r["controller"]: r for r in out["rows"]}
    for label, episodes in out["traces"].items():
        sp = rows[label].get("setpoint", settings.setpoint)
        for e in episodes:
            for old, new in (("speed", "measured"), ("mean_speed", "mean_concept")):
                if old in e:  # a run from before the height concept named them by speed
                    e[new] = e.pop(old)
            e["rmse_steady"] = steady_state_rmse(
                e["measured"], e.get("setpoints", [sp] * len(e["measured"])), rate_hz, transient_s
            )
        rows[label].update(summarize(episodes))
    if env is not None and not any(r.get("reference") for r in out["rows"]):
        targets = settings.targets()
        for sp in targets:
            r = _reference_row(env, settings, sp, "" if len(targets) == 1 else f"sp={sp:g} ", log)
            if r is None:
                break
            first = next(i for i, row in enumerate(out["rows"]) if row["setpoint"] == sp)
            out["rows"].insert(first, _table_row(r))  # before the setpoint's first row
            out["traces"][r["label"]] = r["episodes"]
        # the plots pair rows and traces by position
        out["traces"] = {row["controller"]: out["traces"][row["controller"]] for row in out["rows"]}
    return out


def haeon_neurons(
    model: OpenVLAModel, processor: OpenVLAProcessor, settings: ExperimentSettings
) -> ValueVectorNeurons:
    """Häon et al.'s neurons for ``settings.haeon_words`` (token ids from the model's tokenizer).

    Raises:
        ConfigError: None of the words is in the tokenizer's vocabulary.
    """
    tok = processor.tokenizer
    ids: list[int] = []
    for word in settings.haeon_words:
        ids += [
            int(i)
            for i in tok(word, add_special_tokens=False)["input_ids"]
            if i != tok.unk_token_id
        ]
    if not ids:
        raise ConfigError(
            f"none of {list(settings.haeon_words)} is in the tokenizer's vocabulary",
            fix="name words the instructions use (--haeon-words slowly)",
        )
    return select_value_vector_neurons(
        model,
        sorted(set(ids)),
        n=settings.haeon_neurons,
        top_k=settings.haeon_top_k,
        coef=settings.haeon_coefs[0] if settings.haeon_coefs else 1.0,
        concept="+".join(settings.haeon_words),
    )


def steer_experiment(
    out: Path,
    config: SteerExperimentConfig | None = None,
    settings: ExperimentSettings | None = None,
    log: Log = no_log,
) -> dict[str, Any]:
    """The whole experiment: the VLA, its speed direction, then :func:`run_experiment`.

    Without ``config.model`` the tiny VLA is trained into ``out/vla`` (reused unless
    ``config.retrain``). The direction is loaded from ``config.direction`` or extracted from
    ``config.dataset``, the tiny model's demonstrations or fresh ones (mujoco envs), and saved
    as ``out/speed_<kind>``. ``settings.reset_options`` gain the env's cube layout; the PID
    gains come from ``config.pid_kp``/``pid_ki`` when either is given.

    Returns:
        The report, also written to ``out/results.json`` (with results.md and the plot).
    """
    cfg = config or SteerExperimentConfig()
    settings = settings or ExperimentSettings()
    if settings.concept != cfg.concept:
        raise ConfigError(
            f"the experiment tracks concept {settings.concept!r} but the VLA's demonstrations "
            f"vary {cfg.concept!r}",
            fix="give both the same concept (the CLI's --concept sets both)",
        )
    if cfg.concept == "height":  # the reference row's expert is the demonstrations'
        settings = replace(
            settings,
            reference_expert=height_expert_kwargs(cfg.height_speed),
        )
    t0 = time.perf_counter()
    timing: dict[str, float] = {}
    env, reset, targets = steer_env(cfg.env_id, cfg.image_size, cfg.layout, cfg.jitter)
    reset |= concept_reset(cfg.concept)
    training_seeds = experiment_training_seeds(cfg, len(targets))
    check_disjoint_seeds(settings.seed_ranges(training_seeds))
    demonstrations = None
    graded = cfg.speed_labels != "adverbs"
    if graded and cfg.model is None:  # the same data budget as the three named classes
        n_graded = training_seed_range(cfg, len(targets))[1]
        demonstrations = collect_graded_demonstrations(
            env, n_graded, cfg.speed_labels, cfg.speed_range, 0, reset, targets, log,
            **graded_kwargs(cfg),
        )  # fmt: skip
    vla_training: dict[str, Any] = {}
    if cfg.model is None:
        vla_dir = out / "vla"
        if (vla_dir / "config.json").exists() and not cfg.retrain:
            log(f"reusing {vla_dir} (pass --retrain to train again)")
            model, proc = load_pretrained(vla_dir, device="cpu")
        else:
            steps = cfg.train_steps
            bc = BCSettings(
                steps=steps, batch_size=16, lr=2e-3, log_every=max(1, steps // 8),
                sampling=cfg.bc_sampling, ordinal_words=cfg.ordinal_words(),
            )  # fmt: skip
            t_bc = time.perf_counter()
            model, proc, demonstrations, hist = train_tiny_on_env(
                env,
                vla_dir,
                cfg.demonstration_episodes,
                bc,
                reset,
                targets,
                log=log,
                demonstrations=demonstrations,
                text={"num_hidden_layers": cfg.llm_layers},
                action_bounds=cfg.action_bounds,
            )
            timing["vla_training_s"] = time.perf_counter() - t_bc
            vla_training = {
                "bc_steps": steps,
                "demonstration_steps": len(demonstrations),
                "final": hist[-1] if hist else {},
            }
        model_name = str(vla_dir)
        preset = "as_trained"  # the tiny VLA learnt the env's own frames and actions
        proc = OpenVLAProcessor(proc.config, proc.tokenizer, "as_trained")
    else:
        # on LIBERO: OpenVLA's LIBERO evaluation conventions
        preset = cfg.preset or env_preset(env)
        model, proc = load_for_preset(cfg.model, preset)
        model_name = cfg.model
        side = model.config.image_size
        heights = {c.height for c in env.observation_spec.cameras.values()}
        if preset == "as_trained" and heights != {side}:  # no pipeline resizes its frames
            raise ConfigError(
                f"image_size={cfg.image_size}: the env's camera gives {sorted(heights)} px "
                f"frames but {cfg.model} was trained on {side} px",
                fix=f"pass --image-size {side}",
            )
    if cfg.direction is not None:
        inter = load_intervention(cfg.direction)
    elif graded and demonstrations is not None:  # issue #36: the method the dial chose
        inter = extract_direction(
            model, proc, demonstrations, cfg.method, cfg.layer, cfg.positions, cfg.unnorm_key,
            site=cfg.site,
        )  # fmt: skip
        inter.save(out / f"{cfg.concept}_{cfg.method}")
        log(f"{cfg.method} direction at layer {inter.layer}: {json.dumps(inter.meta)[:300]}")
    else:
        inter = extract_speed_intervention(
            model, proc, cfg, env, reset, targets, demonstrations, log
        )
        inter.save(out / f"speed_{cfg.kind}")
        log(f"{cfg.kind} at layer {inter.layer}: {json.dumps(inter.meta)[:300]}")
    unnorm_key = cfg.unnorm_key
    if unnorm_key is None and preset == "libero":
        suite = str(env.describe().get("suite", ""))
        unnorm_key = libero_unnorm_key(list(model.config.norm_stats), suite)
    policy = OpenVLAPolicy(
        model,
        proc,
        unnorm_key=unnorm_key,
        intervention=inter,
        alpha_limit=settings.alpha_limit,
        preset=preset,
        source=model_name,
        instruction_suffix=cfg.instruction_suffix,
    )
    pid = dict(settings.pid)
    if cfg.pid_kp is not None or cfg.pid_ki is not None:
        pid = {
            "kp": cfg.pid_kp or 0.0,
            "ki": cfg.pid_ki or 0.0,
            "output_min": -settings.alpha_limit,
            "output_max": settings.alpha_limit,
            "anti_windup": "back_calculation",
        }
    settings = replace(settings, pid=pid, reset_options={**reset, **settings.reset_options})
    haeon = None
    if settings.haeon_coefs:
        haeon = ValueVectorHook(model, haeon_neurons(model, proc, settings))
        haeon.intervention.save(out / "haeon_neurons")
        log(f"Häon neurons (layer, neuron): {haeon.intervention.neurons.tolist()}")
    timing["vla_s"] = time.perf_counter() - t0
    report = run_experiment(
        env,
        policy,
        settings,
        out,
        log,
        extra={
            "model": model_name,
            "env_id": cfg.env_id,
            "layout": cfg.layout,
            "jitter_m": cfg.jitter if cfg.layout == "jittered" else None,
            "instruction_suffix": cfg.instruction_suffix,
            "intervention": {"kind": cfg.kind, "layer": inter.layer, "meta": inter.meta},
            "vla_training": vla_training,
        },
        training_seeds=training_seeds,
        haeon=haeon,
    )
    report["timing"] = {**timing, **report["timing"]}
    report["wall_seconds"] = round(time.perf_counter() - t0, 1)
    write_json(out / "results.json", report)
    return report


# ---------------------------------------------------------------------------------------------
# the dial: dose-response of each extraction method (embodied lab steer dial)
# ---------------------------------------------------------------------------------------------


def dial_experiment(
    out: Path,
    config: SteerExperimentConfig | None = None,
    settings: DialSettings | None = None,
    log: Log = no_log,
) -> dict[str, Any]:
    """Is steering the tiny VLA a dial? Dose-response of each extraction method.

    The tiny VLA is trained (into ``out/vla``, reused unless ``config.retrain``) on
    ``settings.demonstrations`` graded demonstrations (seeds 0..n-1,
    :func:`~embodied.apps.lab.steer_dial.collect_graded_demonstrations` with
    ``config.speed_labels`` and ``config.speed_range`` on ``config.layout``). Each method's
    direction is extracted from those demonstrations (``out/speed_<method>``) and its
    dose-response measured on the tuning seeds (fixed alpha, ``settings.episodes`` distinct
    scenes per alpha); the evaluation seeds are not touched. Writes ``dial.json``, ``dial.md``
    and ``dial.png``.

    Returns:
        The report: per method its points, :func:`check_dial` verdict and the direction's meta.
    """
    cfg = config or SteerExperimentConfig(speed_labels="none", layout="random")
    dial = settings or DialSettings()
    t0 = time.perf_counter()
    env, reset, targets = steer_env(cfg.env_id, cfg.image_size, cfg.layout, cfg.jitter)
    reset |= concept_reset(cfg.concept)
    seeds = {
        "demonstrations": (0, dial.demonstrations),
        "tuning": (dial.tuning_seed, dial.tuning_seed + dial.episodes),
    }
    check_disjoint_seeds(seeds)
    demonstrations = collect_graded_demonstrations(
        env, dial.demonstrations, cfg.speed_labels, cfg.speed_range, 0, reset, targets, log,
        **graded_kwargs(cfg),
    )  # fmt: skip
    vla_dir = out / "vla"
    timing: dict[str, float] = {}
    if (vla_dir / "config.json").exists() and not cfg.retrain:
        log(f"reusing {vla_dir} (pass --retrain to train again)")
        model, proc = load_pretrained(vla_dir, device="cpu")
    else:
        bc = BCSettings(
            steps=cfg.train_steps, batch_size=16, lr=2e-3,
            log_every=max(1, cfg.train_steps // 8), sampling=cfg.bc_sampling,
            ordinal_words=cfg.ordinal_words(),
        )  # fmt: skip
        t_bc = time.perf_counter()
        model, proc, _, _ = train_tiny_on_env(
            env, vla_dir, 0, bc, reset, targets, log=log, demonstrations=demonstrations,
            text={"num_hidden_layers": cfg.llm_layers}, action_bounds=cfg.action_bounds,
        )  # fmt: skip
        timing["vla_training_s"] = time.perf_counter() - t_bc
    proc = OpenVLAProcessor(proc.config, proc.tokenizer, "as_trained")
    base = ExperimentSettings(
        setpoint=0.1, episodes=dial.episodes, alpha_limit=dial.alpha_limit,
        sweep_alphas=(), haeon_coefs=(), rl_timesteps=0, reset_options=reset,
        concept=cfg.concept,
    )  # fmt: skip
    report: dict[str, Any] = {
        "env_id": cfg.env_id,
        "concept": cfg.concept,
        "speed_labels": cfg.speed_labels,
        "speed_range": list(cfg.speed_range),
        **(
            height_meta(
                cfg.height_range, cfg.height_speed, cfg.height_start_range, cfg.height_descents
            )
            if cfg.concept == "height"
            else {}
        ),
        "layout": cfg.layout,
        "unnamed_fraction": cfg.unnamed_fraction,
        "bc_sampling": cfg.bc_sampling,
        "speed_embedding": cfg.speed_embedding,
        "action_bounds": cfg.action_bounds,
        "positions": cfg.positions,
        "site": cfg.site,
        "instruction_suffix": cfg.instruction_suffix,
        "settings": asdict(dial),
        "seeds": {k: list(v) for k, v in seeds.items()},
        "methods": {},
    }
    curves: dict[str, list[dict[str, Any]]] = {}
    with torch.no_grad():
        if cfg.concept == "height":  # does each prompt name a height the VLA returns to?
            report["feedback_map"] = height_feedback_map(
                env,
                lambda words: OpenVLAPolicy(
                    model, proc, preset="as_trained", source=str(vla_dir), instruction_suffix=words
                ),
                reset,
                range(dial.tuning_seed, dial.tuning_seed + min(4, dial.episodes)),
            )
        for method in dial.methods:
            t_m = time.perf_counter()
            try:
                direction = extract_direction(
                    model, proc, demonstrations, method, cfg.layer, cfg.positions, site=cfg.site
                )
            except ConfigError as exc:  # e.g. paired on prompts without speed words
                log(f"{method}: skipped ({exc})")
                report["methods"][method] = {"skipped": str(exc)}
                continue
            direction.save(out / f"{cfg.concept}_{method}")
            policy = OpenVLAPolicy(
                model, proc, intervention=direction, alpha_limit=dial.alpha_limit,
                preset="as_trained", source=str(vla_dir),
                instruction_suffix=cfg.instruction_suffix,
            )  # fmt: skip
            points = []
            try:
                for a in dial.alphas:
                    run = run_episodes(
                        env, policy, controllers.make("fixed", value=a), base, dial.episodes,
                        f"{method} a={a:g}", log, first_seed=dial.tuning_seed,
                    )  # fmt: skip
                    points.append(dose_point(a, run["episodes"]))
            finally:  # the next method's policy steers the same model: detach this hook
                policy.close()
            verdict = check_dial(points, dial.min_success)
            curves[method] = points
            report["methods"][method] = {
                "points": points,
                "verdict": verdict,
                "direction": {"layer": direction.layer, "meta": direction.meta},
                "seconds": round(time.perf_counter() - t_m, 1),
            }
            log(f"{method}: {json.dumps(verdict)}")
    dials = [m for m, r in report["methods"].items() if r.get("verdict", {}).get("is_dial")]
    report["dial_methods"] = dials
    report["timing"] = {**timing, "total_s": round(time.perf_counter() - t0, 1)}
    write_json(out / "dial.json", report)
    if curves:
        unit = CONCEPT_UNITS[cfg.concept]
        plot_dose_response(curves, out / "dial.png", f"mean end-effector {cfg.concept} ({unit})")
    write_text(out / "dial.md", dial_markdown(report))
    return report


def dial_markdown(report: dict[str, Any]) -> str:
    """The dial report as a markdown table (one row per method and alpha)."""
    suffix = report.get("instruction_suffix", "")
    concept = report.get("concept", "speed")
    lines = [
        f"# Dose-response ({report['env_id']}, {concept}, labels {report['speed_labels']}, "
        f"layout {report['layout']}" + (f", instruction + {suffix!r})" if suffix else ")"),
        "",
        f"| method | alpha | mean {concept} {CONCEPT_UNITS[concept]} [95 %] "
        "| success [Wilson 95 %] | scenes |",
        "|---|---|---|---|---|",
    ]
    for method, r in report["methods"].items():
        if "skipped" in r:
            lines.append(f"| {method} | skipped: {r['skipped']} | | | |")
            continue
        for p in r["points"]:
            lo, hi = p["concept_ci"]
            slo, shi = p["success_ci"]
            lines.append(
                f"| {method} | {p['alpha']:g} | {p['mean_concept']:.3f} [{lo:.3f}, {hi:.3f}] | "
                f"{p['successes']}/{p['episodes']} [{100 * slo:.0f}, {100 * shi:.0f}] % | "
                f"{p['scenes']} |"
            )
    lines.append("")
    for method, r in report["methods"].items():
        if "verdict" in r:
            v = r["verdict"]
            if v["working_range"] is None:
                unsteered = next(p for p in r["points"] if p["alpha"] == 0.0)
                lines.append(
                    f"- {method}: dial False (no working range: unsteered success "
                    f"{unsteered['successes']}/{unsteered['episodes']} is below the "
                    f"{100 * v['min_success']:.0f} % floor, so no alpha keeps success; "
                    "train the VLA until it succeeds unsteered first)"
                )
                continue
            lines.append(
                f"- {method}: dial {v['is_dial']} (monotone {v['monotone']}, working range "
                f"{v['working_range']}, {concept} {v['ratio_range'][0]:.2f}x-"
                f"{v['ratio_range'][1]:.2f}x unsteered)"
            )
    fm = report.get("feedback_map")
    if fm:
        levels = fm["levels"]
        lines += [
            "",
            "Unsteered first vz (m/s) from each start height (rows, m above the table) under "
            "each prompt (columns; climbing below its height and sinking above it is a height "
            "the VLA returns to):",
            "",
            "| start z | " + " | ".join(f'"at height {k}"' for k in levels) + " |",
            "|---" * (len(levels) + 1) + "|",
        ]
        lines += [
            f"| {z:.2f} | " + " | ".join(f"{v:+.3f}" for v in row) + " |"
            for z, row in zip(fm["start_z_m"], fm["vz_mps"], strict=True)
        ]
    return "\n".join(lines) + "\n"
