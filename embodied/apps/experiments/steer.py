"""The CTRL-STEER experiment: open-loop vs closed-loop activation steering of a VLA.

Pipeline (``embodied steer experiment``):

1. Demos: the scripted expert at three commanded speeds (slow / normal / fast), with the
   speed adverb in the instruction ("reach the red cube quickly"), recorded through
   :func:`embodied.loop.rollout` (camera frames + instruction + action).
2. Behaviour cloning of a tiny OpenVLA (same classes as the 7B model) on those demos.
3. A speed direction: difference of means of residual-stream activations (middle layer,
   action-generating positions) between fast-demo and slow-demo steps.
4. Evaluation with the plain instruction over many episodes for each controller setting:
   no steering, fixed alpha (weak, strong), PID and PPO (RL) on the measured end-effector
   speed. Figures per controller: tracking RMSE to the target speed, overshoot, settling
   time, success rate; a dose-response sweep of fixed alpha; a plot of speed and alpha_t.

The same functions run a real checkpoint (``--model openvla/openvla-7b``) on LIBERO with a
direction from a LIBERO dataset; only the tiny-model training is specific to the built-in task.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

import controllers
import policies
from controllers.analysis import step_response, tracking_rmse
from controllers.rl import RLControllerConfig, SteeringEnv
from controllers.rl.training_rl import PPOSettings, train_rl_controller
from embodied.apps.experiments.steer_report import write_report
from embodied.concepts import make_concept
from embodied.contracts import Controller, Env, Policy
from embodied.datasets import Dataset
from embodied.distributed import Distributed
from embodied.errors import ConfigError
from embodied.loop import Steering, rollout
from policies.openvla.loading_openvla import save_pretrained
from policies.openvla.modeling_openvla import OpenVLAModel
from policies.openvla.processor_openvla import OpenVLAProcessor, action_stats, normalize
from policies.openvla.steering import (
    NeuronCluster,
    SteeringDirection,
    collect_activations,
    mean_difference,
    select_neurons,
)
from policies.openvla.training_openvla import Demos, build_tiny_vla, train_bc

SPEED_LEVELS: dict[str, tuple[tuple[float, float], str]] = {
    "slow": ((0.04, 0.08), "slowly"),
    "normal": ((0.09, 0.15), ""),
    "fast": ((0.16, 0.25), "quickly"),
}
"""Demo level -> (range of the expert's per-episode cruise speed in m/s, adverb appended to
the instruction). Speeds vary within a level, so the model's action-token distribution for
one instruction spreads over a range of speeds (what makes steering graded)."""

Log = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


@dataclass
class ExperimentSettings:
    """What the steering experiment runs.

    Args:
        setpoint: Target end-effector speed in m/s.
        episodes: Evaluation episodes per controller.
        seed: First evaluation seed (episodes use seed, seed+1, ...).
        alpha_weak: Fixed-alpha weak setting.
        alpha_strong: Fixed-alpha strong setting.
        alpha_limit: Knob bounds and controller output limits (+/-).
        sweep_alphas: Fixed alphas of the dose-response sweep (empty = skip).
        sweep_episodes: Episodes per sweep point.
        pid: PID gains/limits (``controllers.make("pid", **pid)``); empty = derive from the sweep.
        rl_timesteps: PPO timesteps for the RL controller (0 = skip the RL row).
        concept_tau_s: EMA time constant of the speed measurement (s).
        band: Settling band as a fraction of the setpoint step.
        reset_options: Inner-env reset options (e.g. a fixed cube layout).
    """

    setpoint: float = 0.06
    episodes: int = 12
    seed: int = 10_000
    alpha_weak: float = -0.5
    alpha_strong: float = -4.0
    alpha_limit: float = 4.0
    sweep_alphas: tuple[float, ...] = (-4.0, -2.0, -1.0, -0.5, -0.25, 0.0)
    sweep_episodes: int = 4
    pid: dict[str, Any] = field(default_factory=dict)
    rl_timesteps: int = 2048
    concept_tau_s: float = 0.1
    band: float = 0.1
    reset_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.setpoint) and self.setpoint > 0):
            raise ConfigError(f"setpoint must be a positive speed in m/s, got {self.setpoint}")
        if self.episodes <= 0:
            raise ConfigError(f"episodes must be positive, got {self.episodes}")
        for name in ("alpha_weak", "alpha_strong"):
            if abs(getattr(self, name)) > self.alpha_limit:
                raise ConfigError(
                    f"{name}={getattr(self, name)} exceeds alpha_limit {self.alpha_limit}",
                    fix="raise --alpha-limit or lower the fixed alpha",
                )


# ---------------------------------------------------------------------------------------------
# demos
# ---------------------------------------------------------------------------------------------


def collect_speed_demos(
    env: Env,
    episodes_per_level: int,
    seed: int = 0,
    levels: dict[str, tuple[tuple[float, float], str]] | None = None,
    reset_options: dict[str, Any] | None = None,
    targets: Sequence[str] = (),
    log: Log = _quiet,
) -> Demos:
    """Expert demos at each speed level, instruction suffixed with the level's adverb.

    Args:
        env: The env (``mujoco:arm_reach``) with a camera.
        episodes_per_level: Episodes per (level, target).
        seed: First reset seed.
        levels: Level -> ((min, max) speed m/s, adverb); default :data:`SPEED_LEVELS`.
        reset_options: Base reset options (e.g. a fixed layout ``cubes``).
        targets: Target names cycled through reset option ``target`` (empty = env's choice).
        log: Progress printer.
    """
    levels = levels or SPEED_LEVELS
    cam = env.observation_spec.image_keys[0]
    images, instr, actions, episode, concept = [], [], [], [], []
    e = 0
    for name, (speed_range, adverb) in levels.items():
        expert = policies.load("expert", env=env, speed_range=tuple(speed_range), seed=seed)
        for _k in range(episodes_per_level):
            for target in targets or (None,):
                opts = dict(reset_options or {})
                if target is not None:
                    opts["target"] = target
                ep = rollout(env, expert, seed=seed + e, reset_options=opts or None)
                speed = float(getattr(expert, "current_speed", np.linalg.norm(ep.actions[0, :3])))
                text = f"{ep.instruction} {adverb}".strip()
                images.append(ep.observations[cam])
                actions.append(ep.actions)
                instr += [text] * len(ep)
                episode += [e] * len(ep)
                concept += [speed] * len(ep)
                e += 1
        log(f"demos: level {name} ({speed_range} m/s) done, {len(instr)} steps so far")
    return Demos(
        np.concatenate(images),
        instr,
        np.concatenate(actions),
        np.asarray(episode),
        np.asarray(concept, dtype=np.float64),
        {"env_id": env.env_id, "levels": {k: list(v) for k, v in levels.items()}, "camera": cam},
    )


def demos_from_dataset(
    path: str, image_key: str, obs_key_map: dict[str, str] | None = None
) -> Demos:
    """Demos from a recorded dataset (``embodied collect`` shards or a robomimic/LIBERO file).

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
    return Demos(
        np.concatenate(images),
        instr,
        acts,
        np.asarray(episode),
        np.linalg.norm(acts[:, :3], axis=1),
        {"dataset": str(path)},
    )


FIXED_LAYOUT: dict[str, tuple[float, float]] = {
    "red": (0.28, 0.12),
    "green": (0.36, -0.04),
    "blue": (0.25, -0.14),
    "yellow": (0.40, 0.13),
}
"""Cube (x, y) in m of the CPU experiment's fixed layout (``--layout fixed``)."""


def train_tiny_on_env(
    env: Env,
    out: Path,
    episodes_per_level: int,
    bc: Any,
    reset_options: dict[str, Any] | None = None,
    targets: Sequence[str] = (),
    seed: int = 0,
    log: Log = _quiet,
    dist: Distributed | None = None,
    **config_overrides: Any,
) -> tuple[OpenVLAModel, OpenVLAProcessor, Demos, list[dict[str, float]]]:
    """Collect speed demos, behaviour-clone a tiny OpenVLA, save it to ``out``.

    Under ``torchrun`` pass ``dist``: every rank collects the same (deterministic) demos and
    trains on its share of each global batch; only the main process saves.

    Returns:
        Model, processor, demos and the training history (one dict per logged step).
    """
    demos = collect_speed_demos(env, episodes_per_level, seed, None, reset_options, targets, log)
    names = env.action_spec.names
    mask = [n not in ("gripper",) for n in names]
    key = env.env_id.replace(":", "_")
    image = env.observation_spec.cameras[demos.meta["camera"].removeprefix("image.")]
    model, proc = build_tiny_vla(
        demos.instructions,
        demos.actions,
        key,
        mask,
        seed,
        image_size=min(64, image.height),
        **config_overrides,
    )
    log(f"tiny OpenVLA: {model.num_parameters() / 1e6:.2f} M parameters, {len(demos)} demo steps")
    hist = train_bc(
        model,
        proc,
        demos,
        bc,
        progress=lambda s, r: log(
            f"bc step {s}: loss {r['loss']:.4f} token acc {r['token_acc']:.2f} ({r['seconds']:.0f} s)"
        ),
        dist=dist,
    )
    if dist is None or dist.is_main:
        save_pretrained(
            model,
            proc.tokenizer,
            out,
            extra={
                "training": {
                    "history": hist,
                    "settings": asdict(bc),
                    "demo_steps": len(demos),
                    "env_id": env.env_id,
                    "reset_options": reset_options or {},
                    "levels": demos.meta["levels"],
                    "world_size": 1 if dist is None else dist.world_size,
                }
            },
        )
    return model, proc, demos, hist


# ---------------------------------------------------------------------------------------------
# direction extraction
# ---------------------------------------------------------------------------------------------


def contrast_masks(concept: np.ndarray, quantile: float = 1 / 3) -> tuple[np.ndarray, np.ndarray]:
    """Steps in the top / bottom ``quantile`` of the concept (positive, negative).

    With a few discrete levels (demos at set speeds) the extreme levels are used.
    """
    levels = np.unique(concept)
    if len(levels) <= 5:
        pos, neg = concept == levels[-1], concept == levels[0]
    else:
        hi, lo = np.quantile(concept, 1 - quantile), np.quantile(concept, quantile)
        pos, neg = concept >= hi, concept <= lo
    if not pos.any() or not neg.any() or (pos & neg).all():
        raise ConfigError("the demos do not vary in the concept; need both fast and slow steps")
    return pos, neg


def extract_intervention(
    model: OpenVLAModel,
    processor: OpenVLAProcessor,
    demos: Demos,
    layer: int | None = None,
    kind: str = "direction",
    concept: str = "ee_speed",
    max_per_set: int = 400,
    neurons: int = 16,
    unnorm_key: str | None = None,
    seed: int = 0,
    positions: str = "last",
) -> SteeringDirection | NeuronCluster:
    """Difference-of-means direction (or neuron cluster) between fast and slow demo steps.

    Activations are averaged over ``positions``: ``"last"`` = the last prompt token (which
    generates the first action token; its input differs between the sets only through what
    it attends to); ``"action"`` = the positions generating all action tokens (teacher-forced
    demo action tokens as inputs); ``"text"`` = every prompt token after the image patches.
    """
    if positions not in ("last", "text", "action"):
        raise ConfigError(f"unknown positions {positions!r}; use 'last', 'text' or 'action'")
    layer = (len(model.decoder_layers) - 1) // 2 if layer is None else int(layer)
    pos, neg = contrast_masks(demos.concept)
    rng = np.random.default_rng(seed)
    stats = action_stats(model.config, unnorm_key)
    acts = {}
    site = "residual" if kind == "direction" else "mlp"
    if kind not in ("direction", "neurons"):
        raise ConfigError(f"unknown intervention kind {kind!r}; use 'direction' or 'neurons'")
    for name, mask in (("positive", pos), ("negative", neg)):
        idx = np.flatnonzero(mask)
        idx = rng.choice(idx, size=min(max_per_set, len(idx)), replace=False)
        tokens = processor.actions.encode(normalize(demos.actions[idx], stats))
        d = tokens.shape[1]
        suffix = tokens[:, :-1].tolist() if positions == "action" else None
        ids, am = processor.encode_prompts([demos.instructions[i] for i in idx], suffix)
        pv = processor.images(demos.images[idx]).to(model.dtype)
        # with left padding, the shortest row bounds the common text suffix length
        n_text = {"text": int(am.sum(1).min()) - 1, "action": d, "last": 1}[positions]
        acts[name] = collect_activations(model, pv, ids, am, layer, n_last=n_text, site=site)
    meta = {
        "contrast": "fast vs slow demo steps (extreme levels or top/bottom third)",
        "concept_positive_mean": float(demos.concept[pos].mean()),
        "concept_negative_mean": float(demos.concept[neg].mean()),
        "model": model.config.name,
        "site": site,
        "positions": positions,
        **{k: v for k, v in demos.meta.items() if isinstance(v, (str, int, float))},
    }
    if kind == "direction":
        return mean_difference(acts["positive"], acts["negative"], layer, concept, meta)
    return select_neurons(acts["positive"], acts["negative"], layer, neurons, concept, meta)


# ---------------------------------------------------------------------------------------------
# evaluation
# ---------------------------------------------------------------------------------------------


def run_episodes(
    env: Env,
    policy: Policy,
    controller: Controller | None,
    settings: ExperimentSettings,
    n: int,
    label: str,
    log: Log = _quiet,
) -> dict[str, Any]:
    """``n`` steered episodes; per-episode traces and aggregate figures."""
    concept = make_concept("ee_speed", filter_tau_s=settings.concept_tau_s)
    steering = Steering(concept, controller, knob="alpha", setpoint=settings.setpoint)
    episodes = []
    for k in range(n):
        if hasattr(policy, "reset_knobs"):
            policy.reset_knobs()
        ep = rollout(
            env,
            policy,
            steering=steering,
            seed=settings.seed + k,
            reset_options=settings.reset_options or None,
            record_images=False,
        )
        t = np.arange(len(ep)) / env.control_rate_hz
        y = ep.measurements
        row: dict[str, Any] = {
            "seed": settings.seed + k,
            "success": bool(ep.success),
            "steps": len(ep),
            "rmse": tracking_rmse(y, ep.setpoints, skip=1),
            "mean_speed": float(np.nanmean(y[1:])) if len(y) > 1 else math.nan,
            "speed": y.tolist(),
            "alpha": ep.knobs["alpha"][:, 0].tolist() if "alpha" in ep.knobs else [0.0] * len(ep),
        }
        try:
            sr = step_response(t, y, settings.setpoint, initial=0.0, band=settings.band)
            row["overshoot_pct"], row["settling_time_s"] = sr.overshoot_pct, sr.settling_time_s
        except ConfigError:
            row["overshoot_pct"], row["settling_time_s"] = math.nan, math.nan
        episodes.append(row)
    summary = summarize(episodes)
    log(
        f"{label:>14s}: success {summary['success_rate']:.2f}  rmse {summary['rmse']:.4f} m/s  "
        f"speed {summary['mean_speed']:.3f} m/s  overshoot {summary['overshoot_pct']:.1f} %  "
        f"settle {summary['settling_time_s']:.2f} s ({summary['settled_fraction']:.2f} settled)"
    )
    return {"label": label, "summary": summary, "episodes": episodes}


def summarize(episodes: list[dict[str, Any]]) -> dict[str, float]:
    """Means over episodes (settling time over the episodes that settle)."""

    def mean(key: str) -> float:
        vals = np.array([e[key] for e in episodes], dtype=np.float64)
        vals = vals[np.isfinite(vals)]
        return float(vals.mean()) if vals.size else math.nan

    settled = [e for e in episodes if np.isfinite(e["settling_time_s"])]
    return {
        "episodes": len(episodes),
        "success_rate": float(np.mean([e["success"] for e in episodes])),
        "rmse": mean("rmse"),
        "mean_speed": mean("mean_speed"),
        "overshoot_pct": mean("overshoot_pct"),
        "settling_time_s": mean("settling_time_s"),
        "settled_fraction": len(settled) / len(episodes),
        "mean_steps": mean("steps"),
    }


def pid_from_sweep(sweep: list[dict[str, Any]], settings: ExperimentSettings) -> dict[str, Any]:
    """PI gains from the fixed-alpha sweep: static gain K = d speed / d alpha (|alpha| <= limit/2).

    IMC tuning of a first-order plant (gain K, time constant ~0.2 s) with closed-loop time
    constant 1 s: ``kp = T / (K lambda)``, ``ki = 1 / (K lambda)``.
    """
    pts = sorted(
        (r["alpha"], r["summary"]["mean_speed"])
        for r in sweep
        if np.isfinite(r["summary"]["mean_speed"]) and abs(r["alpha"]) <= settings.alpha_limit / 2
    )
    gain = math.nan
    if len(pts) >= 2:
        a, v = np.array(pts).T
        gain = float(np.polyfit(a, v, 1)[0])
    if not np.isfinite(gain) or gain <= 1e-3:
        gain = 0.05  # m/s per unit alpha: a conservative fallback
    lam, tau = 1.0, 0.2
    return {
        "kp": tau / (gain * lam),
        "ki": 1.0 / (gain * lam),
        "kd": 0.0,
        "output_min": -settings.alpha_limit,
        "output_max": settings.alpha_limit,
        "rate_limit": 20.0,
        "anti_windup": "back_calculation",
        "static_gain": gain,
    }


def train_rl(
    env: Env,
    policy: Policy,
    settings: ExperimentSettings,
    out: Path,
    log: Log = _quiet,
) -> Controller:
    """PPO controller trained on steered rollouts of the frozen policy."""
    cfg = RLControllerConfig(
        output_min=-settings.alpha_limit,
        output_max=settings.alpha_limit,
        max_delta=0.5,
        error_scale=0.05,
        horizon_steps=env.max_episode_steps,
        setpoint_low=settings.setpoint * 0.7,
        setpoint_high=settings.setpoint * 1.3,
        lambda_delta=0.05,
        beta_success=2.0,
    )
    senv = SteeringEnv(
        env,
        policy,
        make_concept("ee_speed", filter_tau_s=settings.concept_tau_s),
        cfg,
        reset_options=settings.reset_options or None,
    )
    ppo = PPOSettings(
        total_timesteps=settings.rl_timesteps, n_steps=256, batch_size=64, n_epochs=5, seed=0
    )
    controller, _ = train_rl_controller(senv, ppo, save_to=out)
    if hasattr(senv, "close"):
        senv.close()
    log(f"RL controller: {controller.meta if hasattr(controller, 'meta') else ''}")
    return controller


def run_experiment(
    env: Env,
    policy: Policy,
    settings: ExperimentSettings,
    out: Path,
    log: Log = _quiet,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Sweep, then every controller row; writes results.json, results.md and the plot."""
    torch.set_grad_enabled(False)
    sweep = []
    for a in settings.sweep_alphas:
        r = run_episodes(
            env,
            policy,
            controllers.make("fixed", value=a),
            settings,
            settings.sweep_episodes,
            f"sweep a={a:g}",
            log,
        )
        r["alpha"] = a
        sweep.append(r)
    pid_cfg = dict(settings.pid) or pid_from_sweep(sweep, settings)
    static_gain = pid_cfg.pop("static_gain", None)
    rows: list[tuple[str, Controller | None]] = [
        ("none", None),
        (f"fixed a={settings.alpha_weak:g}", controllers.make("fixed", value=settings.alpha_weak)),
        (
            f"fixed a={settings.alpha_strong:g}",
            controllers.make("fixed", value=settings.alpha_strong),
        ),
        ("pid", controllers.make("pid", **pid_cfg)),
    ]
    if settings.rl_timesteps > 0:
        torch.set_grad_enabled(True)
        rl = train_rl(env, policy, settings, out / "rl_controller", log)
        torch.set_grad_enabled(False)
        rows.append(("rl (ppo)", rl))
    results = [
        run_episodes(env, policy, c, settings, settings.episodes, name, log) for name, c in rows
    ]
    report = {
        "settings": asdict(settings),
        "pid": pid_cfg,
        "static_gain_mps_per_alpha": static_gain,
        "sweep": [{"alpha": r["alpha"], **r["summary"]} for r in sweep],
        "rows": [{"controller": r["label"], **r["summary"]} for r in results],
        "traces": {r["label"]: r["episodes"] for r in results},
        **(extra or {}),
    }
    write_report(report, out, env.control_rate_hz)
    return report
