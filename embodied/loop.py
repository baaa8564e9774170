"""THE closed loop: one function for simulation, evaluation, tuning and the real robot.

Each control step::

    observe -> (measure concept -> controller -> set knob) -> policy -> validate
            -> safety filter -> env.step

and everything is recorded in an :class:`Episode`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from embodied.contracts import ActionFilter, Concept, Controller, Env, Judge, Policy, Steerable
from embodied.errors import CompatibilityError, ConfigError
from embodied.specs import Observation

Setpoint = float | Callable[[float], float]
"""A constant setpoint, or a schedule ``f(t_s) -> setpoint`` of episode time in seconds."""


@dataclass
class Steering:
    """Closed-loop control of one policy knob.

    Each step the loop measures ``concept``, asks ``controller`` for a command given the
    setpoint, and sets the knob ``knob`` of the (Steerable) policy to ``to_knob(command)``.

    Args:
        concept: The measured signal (e.g. end-effector speed, m/s).
        controller: Feedback controller; None measures only (open loop, knob untouched).
        knob: Name of the policy knob the command drives.
        setpoint: Target value of the concept, constant or a function of time (s).
        to_knob: Maps the scalar command onto the knob value (default: identity), e.g.
            an interpolation between two behaviour latents for a vector knob.
    """

    concept: Concept
    controller: Controller | None = None
    knob: str = "alpha"
    setpoint: Setpoint = 0.0
    to_knob: Callable[[float], float | np.ndarray] | None = None

    def setpoint_at(self, t_s: float) -> float:
        """Setpoint at episode time ``t_s`` seconds."""
        return float(self.setpoint(t_s)) if callable(self.setpoint) else float(self.setpoint)

    def reset(self) -> None:
        """Reset concept and controller state."""
        self.concept.reset()
        if self.controller is not None:
            self.controller.reset()


@dataclass
class StepRecord:
    """What happened at one control step (passed to callbacks as it happens).

    Attributes:
        t: Step index.
        obs: Observation the action was chosen from.
        action: Action sent to the env (after the safety filter).
        raw_action: Action the policy produced (before the filter).
        reward: Env reward.
        success: ``info["success"]`` after the step.
        measurement: Concept value measured before acting (NaN without steering).
        setpoint: Concept setpoint (NaN without steering).
        knobs: Knob values in force for this step.
        timing_ms: Wall time per stage: ``control``, ``policy``, ``safety``, ``env``, ``total``.
        info: Env info after the step.
        instruction: The task instruction in force (the observation's, else the env's).
    """

    t: int
    obs: Observation
    action: np.ndarray
    raw_action: np.ndarray
    reward: float
    success: bool
    measurement: float
    setpoint: float
    knobs: dict[str, np.ndarray]
    timing_ms: dict[str, float]
    info: Mapping[str, Any]
    instruction: str = ""


@dataclass
class Episode:
    """A recorded rollout.

    Attributes:
        observations: Per-key stacked observations, each of length T (instruction excluded).
        actions: (T, action_dim) actions sent to the env.
        raw_actions: (T, action_dim) actions before the safety filter.
        rewards: (T,) rewards.
        knobs: Knob name -> (T, size) values in force at each step.
        measurements: (T,) concept values (NaN without steering).
        setpoints: (T,) setpoints (NaN without steering).
        timings_ms: Stage name -> (T,) wall times in ms.
        success: Whether the env reported success at the end (or at any step, see ``success_step``).
        success_step: First step with success, or -1.
        judge_score: Judge probability of success, or None if no judge ran.
        instruction: The task instruction.
        meta: Env id, seed, control rate, specs, termination reason.
        final_info: Env info after the last step (not stored to disk).
        final_observation: Camera images after the last step (``image.<camera>`` keys; empty
            without ``record_images``); the frame that shows the outcome, e.g. for judges.
    """

    observations: dict[str, np.ndarray]
    actions: np.ndarray
    raw_actions: np.ndarray
    rewards: np.ndarray
    knobs: dict[str, np.ndarray]
    measurements: np.ndarray
    setpoints: np.ndarray
    timings_ms: dict[str, np.ndarray]
    success: bool
    success_step: int
    judge_score: float | None
    instruction: str
    meta: dict[str, Any] = field(default_factory=dict)
    final_info: Mapping[str, Any] = field(default_factory=dict)
    final_observation: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.actions.shape[0])

    def frames(self, camera: str | None = None) -> np.ndarray:
        """Camera frames (T, H, W, 3) of ``camera`` (default: the first camera)."""
        keys = [k for k in self.observations if k.startswith("image.")]
        if not keys:
            raise ConfigError("episode has no camera frames; record with record_images=True")
        key = f"image.{camera}" if camera else keys[0]
        if key not in self.observations:
            raise ConfigError(f"episode has no {key!r}; cameras: {keys}")
        return self.observations[key]


def _stack(rows: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    if not rows:
        return {}
    return {k: np.stack([np.asarray(r[k]) for r in rows]) for k in rows[0]}


def rollout(
    env: Env,
    policy: Policy,
    *,
    steering: Steering | None = None,
    safety: ActionFilter | None = None,
    judge: Judge | None = None,
    judge_clip: int = 5,
    seed: int | None = None,
    reset_options: Mapping[str, Any] | None = None,
    max_steps: int | None = None,
    record_images: bool = True,
    stop_on_success: bool = True,
    pace: bool = False,
    callbacks: Sequence[Callable[[StepRecord], None]] = (),
    should_stop: Callable[[], bool] | None = None,
) -> Episode:
    """Run one closed-loop episode of ``policy`` on ``env``.

    Args:
        env: Simulated env or robot env (same contract).
        policy: The policy; must be :class:`Steerable` when ``steering`` sets a knob.
        steering: Optional closed-loop knob control (concept -> controller -> knob).
        safety: Optional action filter (limits, watchdogs, e-stop) between policy and env.
        judge: Optional judge scoring the final clip of the first camera.
        judge_clip: Frames in the judged clip (evenly spaced, ending at the last frame).
        seed: Reset seed (deterministic envs give identical episodes for identical seeds); also
            passed to ``policy.seed_episode`` so a stochastic policy's episode is reproducible.
        reset_options: Passed to ``env.reset`` (e.g. a shifted scene, an init-state index).
        max_steps: Step limit; defaults to ``env.max_episode_steps``.
        record_images: Keep camera frames in the episode (memory: T x H x W x 3 bytes each).
        stop_on_success: End the episode at the first step with ``info["success"]``.
        pace: Sleep to hold ``env.control_rate_hz`` (real robots); simulation runs free.
        callbacks: Called with each :class:`StepRecord` (telemetry, tuning UIs, loggers).
        should_stop: Polled each step; returning True ends the episode (Ctrl-C, UI stop).

    Returns:
        The recorded :class:`Episode`.

    Raises:
        CompatibilityError: the policy does not fit the env, or steering targets a
            non-steerable policy; raised before the first step.
        ActionError: the policy returned a wrong-shaped or non-finite action.
    """
    policy.check_compatible(env)
    if steering is not None and steering.controller is not None:
        if not isinstance(policy, Steerable):
            raise CompatibilityError(
                f"steering needs a Steerable policy; {type(policy).__name__} has no knobs",
                fix="use a steerable policy or drop the controller",
            )
        if steering.knob not in policy.knobs():
            raise CompatibilityError(
                f"policy {type(policy).__name__} has no knob {steering.knob!r}; "
                f"knobs: {sorted(policy.knobs())}"
            )
    horizon = env.max_episode_steps if max_steps is None else int(max_steps)
    if horizon <= 0:
        raise ConfigError(f"max_steps must be positive, got {horizon}")
    dt = env.dt

    obs, info = env.reset(seed=seed, options=dict(reset_options) if reset_options else None)
    policy.reset()
    if seed is not None:
        policy.seed_episode(int(seed))
    if safety is not None:
        safety.reset()
    if steering is not None:
        steering.reset()

    obs_rows: list[dict[str, Any]] = []
    actions: list[np.ndarray] = []
    raw_actions: list[np.ndarray] = []
    rewards: list[float] = []
    knob_rows: list[dict[str, np.ndarray]] = []
    measurements: list[float] = []
    setpoints: list[float] = []
    timing_rows: list[dict[str, float]] = []
    success_step = -1
    reason = "max_steps"
    next_tick = time.perf_counter()
    steerable = isinstance(policy, Steerable)

    for t in range(horizon):
        if should_stop is not None and should_stop():
            reason = "stopped"
            break
        t_start = time.perf_counter()
        measurement = setpoint = float("nan")
        if steering is not None:
            measurement = float(steering.concept.measure(obs, info, dt))
            setpoint = steering.setpoint_at(t * dt)
            if steering.controller is not None:
                command = steering.controller.update(measurement, setpoint, dt)
                value = steering.to_knob(command) if steering.to_knob else command
                policy.set_knob(steering.knob, value)  # type: ignore[attr-defined]
        t_control = time.perf_counter()
        raw = env.action_spec.validate(policy.select_action(obs))
        t_policy = time.perf_counter()
        action = safety(raw, obs) if safety is not None else raw
        t_safety = time.perf_counter()

        instruction = obs.get("instruction", env.instruction)
        seen = {k: v for k, v in obs.items() if k != "instruction"}
        row = seen
        if not record_images:  # the episode keeps no frames; callbacks still see them
            row = {k: v for k, v in seen.items() if not k.startswith("image.")}
        obs_rows.append(row)
        knob_rows.append(
            {name: policy.get_knob(name) for name in policy.knobs()} if steerable else {}  # type: ignore[attr-defined]
        )

        obs, reward, terminated, truncated, info = env.step(action)
        t_env = time.perf_counter()

        success = bool(info.get("success", False))
        if success and success_step < 0:
            success_step = t
        actions.append(action)
        raw_actions.append(raw)
        rewards.append(float(reward))
        measurements.append(measurement)
        setpoints.append(setpoint)
        timing = {
            "control": (t_control - t_start) * 1e3,
            "policy": (t_policy - t_control) * 1e3,
            "safety": (t_safety - t_policy) * 1e3,
            "env": (t_env - t_safety) * 1e3,
            "total": (t_env - t_start) * 1e3,
        }
        timing_rows.append(timing)
        if callbacks:
            record = StepRecord(
                t,
                seen,
                action,
                raw,
                float(reward),
                success,
                measurement,
                setpoint,
                knob_rows[-1],
                timing,
                info,
                str(instruction),
            )
            for cb in callbacks:
                cb(record)
        if success and stop_on_success:
            reason = "success"
            break
        if terminated or truncated:
            reason = "terminated" if terminated else "truncated"
            break
        if pace:
            next_tick += dt
            delay = next_tick - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            else:
                next_tick = time.perf_counter()

    observations = _stack(obs_rows)
    final_success = success_step >= 0
    judge_score = None
    if judge is not None:
        img_keys = [k for k in observations if k.startswith("image.")]
        if not img_keys:
            raise ConfigError("a judge needs camera frames; enable a camera and record_images")
        frames = observations[img_keys[0]]
        if img_keys[0] in obs:  # the frame after the last step shows the outcome
            frames = np.concatenate([frames, np.asarray(obs[img_keys[0]])[None]])
        idx = np.linspace(0, len(frames) - 1, num=min(judge_clip, len(frames))).round()
        judge_score = float(judge.score(frames[idx.astype(int)], env.instruction))

    action_dim = env.action_spec.dim
    return Episode(
        observations=observations,
        actions=np.asarray(actions, dtype=np.float64).reshape(-1, action_dim),
        raw_actions=np.asarray(raw_actions, dtype=np.float64).reshape(-1, action_dim),
        rewards=np.asarray(rewards, dtype=np.float64),
        knobs={k: np.asarray(v, dtype=np.float64) for k, v in _stack(knob_rows).items()},
        measurements=np.asarray(measurements, dtype=np.float64),
        setpoints=np.asarray(setpoints, dtype=np.float64),
        timings_ms={k: np.asarray(v) for k, v in _stack(timing_rows).items()},
        success=final_success,
        success_step=success_step,
        judge_score=judge_score,
        instruction=env.instruction,
        meta={
            "env_id": env.env_id,
            "seed": seed,
            "control_rate_hz": env.control_rate_hz,
            "reason": reason,
            "reset_options": dict(reset_options) if reset_options else {},
            "steering_knob": steering.knob if steering is not None else None,
            "concept": steering.concept.name if steering is not None else None,
        },
        final_info=info,
        final_observation={
            k: np.asarray(v) for k, v in obs.items() if k.startswith("image.") and record_images
        },
    )
