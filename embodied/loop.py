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
        rest: Command while the concept is undefined (a NaN measurement, e.g. the cruise
            height over the target, where the task itself descends): None hands the NaN to
            the controller (which holds its output); a value commands it instead and skips
            the controller, whose state waits for the concept to return.
    """

    concept: Concept
    controller: Controller | None = None
    knob: str = "alpha"
    setpoint: Setpoint = 0.0
    to_knob: Callable[[float], float | np.ndarray] | None = None
    rest: float | None = None

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
    _check_steering(policy, steering)
    horizon = env.max_episode_steps if max_steps is None else int(max_steps)
    if horizon <= 0:
        raise ConfigError(f"max_steps must be positive, got {horizon}")
    dt = env.dt
    obs, info = _reset(env, policy, safety, steering, seed, reset_options)

    trace = _Trace()
    reason = "max_steps"
    next_tick = time.perf_counter()
    loop = _Loop(env, policy, steering, safety, dt, isinstance(policy, Steerable), record_images)
    for t in range(horizon):
        if should_stop is not None and should_stop():
            reason = "stopped"
            break
        record, obs, terminated, truncated = _step(loop, obs, info, t, trace)
        info = record.info
        for cb in callbacks:
            cb(record)
        if record.success and stop_on_success:
            reason = "success"
            break
        if terminated or truncated:
            reason = "terminated" if terminated else "truncated"
            break
        if pace:
            next_tick = _pace(next_tick, dt)

    observations = _stack(trace.obs_rows)
    judge_score = None
    if judge is not None:
        judge_score = _judge_score(judge, judge_clip, observations, obs, env.instruction)
    meta = {
        "env_id": env.env_id,
        "seed": seed,
        "control_rate_hz": env.control_rate_hz,
        "reason": reason,
        "reset_options": dict(reset_options) if reset_options else {},
        "steering_knob": steering.knob if steering is not None else None,
        "concept": steering.concept.name if steering is not None else None,
    }
    return _episode(env, trace, observations, judge_score, meta, obs, info, record_images)


@dataclass(frozen=True)
class _Loop:
    """What every step of one :func:`rollout` runs with (its arguments, resolved once)."""

    env: Env
    policy: Policy
    steering: Steering | None
    safety: ActionFilter | None
    dt: float
    """Control period (s)."""
    steerable: bool
    """The policy has knobs (they are recorded each step)."""
    record_images: bool


@dataclass
class _Trace:
    """The per-step rows of one :func:`rollout`, stacked into its :class:`Episode` at the end."""

    obs_rows: list[dict[str, Any]] = field(default_factory=list)
    actions: list[np.ndarray] = field(default_factory=list)
    raw_actions: list[np.ndarray] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    knob_rows: list[dict[str, np.ndarray]] = field(default_factory=list)
    measurements: list[float] = field(default_factory=list)
    setpoints: list[float] = field(default_factory=list)
    timing_rows: list[dict[str, float]] = field(default_factory=list)
    success_step: int = -1
    """First step with success, or -1."""


def _check_steering(policy: Policy, steering: Steering | None) -> None:
    """Refuse a controller that would set a knob ``policy`` does not have.

    Raises:
        CompatibilityError: the policy is not :class:`Steerable`, or has no such knob.
    """
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


def _reset(
    env: Env,
    policy: Policy,
    safety: ActionFilter | None,
    steering: Steering | None,
    seed: int | None,
    reset_options: Mapping[str, Any] | None,
) -> tuple[Observation, Mapping[str, Any]]:
    """Reset the env, then the policy (seeded with ``seed``), the filter and the steering.

    The env goes first: its reset may draw from the global RNGs the policy is seeded after.

    Returns:
        The first observation and the env's reset info.
    """
    obs, info = env.reset(seed=seed, options=dict(reset_options) if reset_options else None)
    policy.reset()
    if seed is not None:
        policy.seed_episode(int(seed))
    if safety is not None:
        safety.reset()
    if steering is not None:
        steering.reset()
    return obs, info


def _steer(loop: _Loop, obs: Observation, info: Mapping[str, Any], t: int) -> tuple[float, float]:
    """Measure the concept and, with a controller, set the knob for step ``t``.

    Returns:
        The measurement and the setpoint (both NaN without steering).
    """
    measurement = setpoint = float("nan")
    steering, dt = loop.steering, loop.dt
    if steering is not None:
        measurement = float(steering.concept.measure(obs, info, dt))
        setpoint = steering.setpoint_at(t * dt)
        if steering.controller is not None:
            if steering.rest is not None and measurement != measurement:
                command = float(steering.rest)
            else:
                command = steering.controller.update(measurement, setpoint, dt)
            value = steering.to_knob(command) if steering.to_knob else command
            loop.policy.set_knob(steering.knob, value)  # type: ignore[attr-defined]
    return measurement, setpoint


def _step(
    loop: _Loop, obs: Observation, info: Mapping[str, Any], t: int, trace: _Trace
) -> tuple[StepRecord, Observation, bool, bool]:
    """Control step ``t``: steer, act, filter, step the env; its rows go into ``trace``.

    Args:
        loop: The rollout's env, policy, steering and filter.
        obs: The observation the action is chosen from.
        info: The env info that came with ``obs``.
        t: Step index.
        trace: The episode so far.

    Returns:
        The step's record (its ``info`` is the env's after the step), the next observation,
        and the env's terminated and truncated flags.

    Raises:
        ActionError: the policy returned a wrong-shaped or non-finite action.
    """
    env, policy, safety = loop.env, loop.policy, loop.safety
    t_start = time.perf_counter()
    measurement, setpoint = _steer(loop, obs, info, t)
    t_control = time.perf_counter()
    raw = env.action_spec.validate(policy.select_action(obs))
    t_policy = time.perf_counter()
    action = safety(raw, obs) if safety is not None else raw
    t_safety = time.perf_counter()

    instruction = obs.get("instruction", env.instruction)
    seen = {k: v for k, v in obs.items() if k != "instruction"}
    row = seen
    if not loop.record_images:  # the episode keeps no frames; callbacks still see them
        row = {k: v for k, v in seen.items() if not k.startswith("image.")}
    trace.obs_rows.append(row)
    trace.knob_rows.append(
        {name: policy.get_knob(name) for name in policy.knobs()} if loop.steerable else {}  # type: ignore[attr-defined]
    )

    next_obs, reward, terminated, truncated, next_info = env.step(action)
    t_env = time.perf_counter()

    success = bool(next_info.get("success", False))
    if success and trace.success_step < 0:
        trace.success_step = t
    trace.actions.append(action)
    trace.raw_actions.append(raw)
    trace.rewards.append(float(reward))
    trace.measurements.append(measurement)
    trace.setpoints.append(setpoint)
    timing = {
        "control": (t_control - t_start) * 1e3,
        "policy": (t_policy - t_control) * 1e3,
        "safety": (t_safety - t_policy) * 1e3,
        "env": (t_env - t_safety) * 1e3,
        "total": (t_env - t_start) * 1e3,
    }
    trace.timing_rows.append(timing)
    record = StepRecord(
        t,
        seen,
        action,
        raw,
        float(reward),
        success,
        measurement,
        setpoint,
        trace.knob_rows[-1],
        timing,
        next_info,
        str(instruction),
    )
    return record, next_obs, bool(terminated), bool(truncated)


def _pace(next_tick: float, dt: float) -> float:
    """Sleep until the next control tick ``dt`` seconds after ``next_tick``; return that tick.

    A late step restarts the schedule from now rather than rushing to catch up.
    """
    next_tick += dt
    delay = next_tick - time.perf_counter()
    if delay > 0:
        time.sleep(delay)
    else:
        next_tick = time.perf_counter()
    return next_tick


def _judge_score(
    judge: Judge,
    judge_clip: int,
    observations: Mapping[str, np.ndarray],
    final_obs: Observation,
    instruction: str,
) -> float:
    """The judge's success probability on the first camera's final clip.

    Args:
        judge: The judge.
        judge_clip: Frames in the clip (evenly spaced, ending at the last frame).
        observations: The episode's stacked observations.
        final_obs: The observation after the last step.
        instruction: The task instruction.

    Raises:
        ConfigError: the episode recorded no camera frames.
    """
    img_keys = [k for k in observations if k.startswith("image.")]
    if not img_keys:
        raise ConfigError("a judge needs camera frames; enable a camera and record_images")
    frames = observations[img_keys[0]]
    if img_keys[0] in final_obs:  # the frame after the last step shows the outcome
        frames = np.concatenate([frames, np.asarray(final_obs[img_keys[0]])[None]])
    idx = np.linspace(0, len(frames) - 1, num=min(judge_clip, len(frames))).round()
    return float(judge.score(frames[idx.astype(int)], instruction))


def _episode(
    env: Env,
    trace: _Trace,
    observations: dict[str, np.ndarray],
    judge_score: float | None,
    meta: dict[str, Any],
    final_obs: Observation,
    final_info: Mapping[str, Any],
    record_images: bool,
) -> Episode:
    """The :class:`Episode` of ``trace`` (rows stacked into arrays, float64 but timings)."""
    action_dim = env.action_spec.dim
    return Episode(
        observations=observations,
        actions=np.asarray(trace.actions, dtype=np.float64).reshape(-1, action_dim),
        raw_actions=np.asarray(trace.raw_actions, dtype=np.float64).reshape(-1, action_dim),
        rewards=np.asarray(trace.rewards, dtype=np.float64),
        knobs={k: np.asarray(v, dtype=np.float64) for k, v in _stack(trace.knob_rows).items()},
        measurements=np.asarray(trace.measurements, dtype=np.float64),
        setpoints=np.asarray(trace.setpoints, dtype=np.float64),
        timings_ms={k: np.asarray(v) for k, v in _stack(trace.timing_rows).items()},
        success=trace.success_step >= 0,
        success_step=trace.success_step,
        judge_score=judge_score,
        instruction=env.instruction,
        meta=meta,
        final_info=final_info,
        final_observation={
            k: np.asarray(v)
            for k, v in final_obs.items()
            if k.startswith("image.") and record_images
        },
    )
