"""Running grid episodes: :class:`EpisodeRunner` (one per worker) and :class:`EpisodeRecord`.

Every episode goes through :func:`embodied.loop.rollout` (the one loop); the runner only
builds and caches envs/policies, passes seeds and reset options, and records video.

An episode that raises is a failed episode, as in OpenVLA's LIBERO evaluation
(``experiments/robot/libero/run_libero_eval.py`` catches the exception, logs it and counts
the episode in n without a success): :meth:`EpisodeRunner.attempt` turns the exception into
an :class:`EpisodeRecord` with ``error`` set, which every backend records and reports like
any other episode. Errors that say the evaluation itself is set up wrong still stop it (see
:func:`aborts_evaluation`).
"""

from __future__ import annotations

import os
import re
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import sim
from embodied.apps.evaluation.configuration_evaluation import (
    EpisodeSpec,
    EvalConfig,
    EvalVariant,
    PolicyFactory,
    PolicyLoader,
)
from embodied.contracts import Env, Policy
from embodied.errors import ActionError, EmbodiedError, SafetyFault
from embodied.io import json_default
from embodied.loop import Episode, Steering, StepRecord, rollout
from embodied.recording import McapRecorder
from embodied.rewards import load_judge
from embodied.rewards.clips import context_indices
from embodied.rewards.demo2reward.demonstrations import task_text
from embodied.video import write_mp4


@dataclass
class EpisodeRecord:
    """The outcome of one grid episode.

    Attributes:
        spec: The grid cell.
        success: Whether the env reported success.
        steps: Control steps taken.
        success_step: First successful step, or -1.
        reward_sum: Sum of rewards.
        reason: Why the episode ended (``success``, ``max_steps``, ...).
        instruction: Task instruction.
        duration_s: Wall time of the episode incl. reset (s).
        env_ms_per_step: Median env step time (ms).
        policy_ms_per_step: Median policy time (ms).
        attempts: Times the episode was started (> 1 after a worker died).
        worker: Worker id (pid) that finished it.
        video: Video path relative to the output folder, or None.
        error: Why the episode failed to run to its end (the exception it raised, or the
            worker deaths), or None; such an episode counts as a failure.
        env_description: ``env.describe()`` (first episode of each env per worker only).
        judge_prob: The judge's success probability of the final clip (with a judge), or None.
        judge_success: ``judge_prob >= judge_threshold`` (with a judge), or None.
        judge_threshold: The judge's decision threshold (with a judge), or None.
        outcome: The env's final-step info entries that are plain scalars (str, bool, int,
            float; not arrays), e.g. arm_reach's ``reached`` / ``wrong_cube_reached``; numpy
            scalars become Python ones, ``success`` is left out (see ``success``); empty for
            an episode that could not be run. Boolean entries are counted per task in
            :attr:`~embodied.apps.evaluation.stats.TaskStats.outcome_rates`.
    """

    spec: EpisodeSpec
    success: bool = False
    steps: int = 0
    success_step: int = -1
    reward_sum: float = 0.0
    reason: str = ""
    instruction: str = ""
    duration_s: float = 0.0
    env_ms_per_step: float = float("nan")
    policy_ms_per_step: float = float("nan")
    attempts: int = 1
    worker: int = 0
    video: str | None = None
    error: str | None = None
    env_description: dict[str, Any] | None = field(default=None, repr=False)
    judge_prob: float | None = None
    judge_success: bool | None = None
    judge_threshold: float | None = None
    outcome: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (without the env description, stored once per env in the results)."""
        d = asdict(self)
        d.pop("env_description")
        d["spec"] = self.spec.to_dict()
        return d


EPISODE_OUTCOME_ERRORS: tuple[type[EmbodiedError], ...] = (ActionError, SafetyFault)
"""The project's errors that describe what happened in one episode (a non-finite action, a
safety rule that stopped the loop) rather than how the evaluation is set up: they fail that
episode like any other exception (``deploy`` likewise ends the episode on them)."""


def aborts_evaluation(exc: BaseException) -> bool:
    """Whether ``exc``, raised while running an episode, stops the whole evaluation.

    Every :class:`~embodied.errors.EmbodiedError` except :data:`EPISODE_OUTCOME_ERRORS` does:
    ``CompatibilityError``, ``ConfigError``, ``UnknownNameError``, ``CheckpointError``,
    ``DatasetError``, ``RenderError`` say the configuration, the policy/env pairing or the
    files are wrong, would repeat in every episode, and name the fix the user must apply.
    Anything else (a simulator or policy exception, :data:`EPISODE_OUTCOME_ERRORS`) fails
    only its episode. ``KeyboardInterrupt`` and other non-``Exception`` errors always stop.
    """
    if not isinstance(exc, Exception):
        return True
    return isinstance(exc, EmbodiedError) and not isinstance(exc, EPISODE_OUTCOME_ERRORS)


def describe_exception(exc: BaseException, frames: int = 3, limit: int = 500) -> str:
    """``"Type: message"`` plus the innermost ``frames`` traceback frames, one per line.

    Args:
        exc: The exception (with its ``__traceback__``).
        frames: Traceback frames kept (the innermost, where it was raised).
        limit: Characters kept of the message.
    """
    message = str(exc).strip()
    if len(message) > limit:
        message = message[: limit - 3] + "..."
    lines = [f"{type(exc).__name__}: {message}" if message else type(exc).__name__]
    for fr in traceback.extract_tb(exc.__traceback__)[-frames:] if frames > 0 else []:
        where = "/".join(Path(fr.filename).parts[-2:])
        lines.append(f"  at {where}:{fr.lineno} in {fr.name}")
    return "\n".join(lines)


def video_name(spec: EpisodeSpec) -> str:
    """File name of an episode's video, e.g. ``libero_libero_spatial_3__default__ep000.mp4``."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", spec.env_id)
    return f"{safe}__{spec.variant}__ep{spec.episode:03d}.mp4"


def scalar_outcome(info: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of an env's ``info`` that are plain scalars, as Python values.

    Keeps str, bool, int and float values (numpy scalars converted: ``np.bool_`` -> bool,
    ``np.integer`` -> int, ``np.floating`` -> float; non-finite floats are kept, and written
    as null in ``results.json``); drops arrays, sequences, mappings, None and ``success``
    (an :class:`EpisodeRecord` field of its own). Keys are sorted.
    """
    out: dict[str, Any] = {}
    for key in sorted(info, key=str):
        value = info[key]
        if key == "success":
            continue
        if isinstance(value, np.bool_ | np.number | np.str_):
            value = json_default(value)  # a numpy scalar as its Python value
        if isinstance(value, bool):
            out[str(key)] = bool(value)
        elif isinstance(value, int):
            out[str(key)] = int(value)
        elif isinstance(value, float):
            out[str(key)] = float(value)
        elif isinstance(value, str):
            out[str(key)] = str(value)
    return out


def record_fields(spec: EpisodeSpec, ep: Episode, t0: float) -> dict[str, Any]:
    """The :class:`EpisodeRecord` fields every runner fills from a finished episode.

    Args:
        spec: The grid episode that was run.
        ep: Its rollout.
        t0: ``time.perf_counter()`` when the episode started (for ``duration_s``).
    """
    timings = ep.timings_ms
    return {
        "spec": spec,
        "success": bool(ep.success),
        "steps": len(ep),
        "success_step": int(ep.success_step),
        "reward_sum": float(ep.rewards.sum()),
        "reason": str(ep.meta.get("reason", "")),
        "instruction": ep.instruction,
        "duration_s": time.perf_counter() - t0,
        "env_ms_per_step": float(np.median(timings["env"])) if len(ep) else float("nan"),
        "policy_ms_per_step": float(np.median(timings["policy"])) if len(ep) else float("nan"),
        "worker": os.getpid(),
        "outcome": scalar_outcome(ep.final_info),
    }


class EpisodeRunner:
    """Runs grid episodes in one process, caching the current env and policies.

    Args:
        policy_factory: ``factory(env) -> Policy`` (picklable for worker processes).
        variants: Variant name -> variant.
        env_kwargs: Family -> kwargs for ``sim.make``.
        max_steps: Step limit (None: the env's horizon).
        out: Output folder (videos go to ``out/videos``), or None.
        judge: Judge spec scoring each episode's final clip, or None.
    """

    def __init__(
        self,
        policy_factory: PolicyFactory,
        variants: Mapping[str, EvalVariant],
        env_kwargs: Mapping[str, Mapping[str, Any]],
        max_steps: int | None,
        out: Path | None,
        judge: str | None = None,
        record: str | None = None,
    ) -> None:
        self.policy_factory = policy_factory
        self.variants = dict(variants)
        self.env_kwargs = {k: dict(v) for k, v in env_kwargs.items()}
        self.max_steps = max_steps
        self.out = out
        self._env: Env | None = None
        self._env_id = ""
        self._policies: dict[str, Policy] = {}
        self._described: set[str] = set()
        self.judge_spec = judge
        self._judge: Any = None
        self.record = record
        self._recording: McapRecorder | None = None

    @classmethod
    def from_config(cls, config: EvalConfig, policy_factory: PolicyFactory) -> EpisodeRunner:
        """The runner for ``config``."""
        return cls(
            policy_factory,
            {v.name: v for v in config.variants},
            config.env_kwargs,
            config.max_steps,
            None if config.out is None else Path(config.out),
            config.judge,
            None if config.record is None else str(config.record),
        )

    def env(self, env_id: str) -> Env:
        """The env ``env_id`` (built once; the previous env is closed when the task changes)."""
        if self._env is None or self._env_id != env_id:
            self.close()
            family, _ = sim.split_env_id(env_id)
            self._env = sim.make(env_id, **self.env_kwargs.get(family, {}))
            self._env_id = env_id
        return self._env

    def policy(self, env: Env, variant: EvalVariant) -> Policy:
        """The policy for ``variant`` on the current env (built once per env)."""
        if variant.name not in self._policies:
            factory = self.policy_factory
            if variant.policy_kwargs and isinstance(factory, PolicyLoader):
                factory = PolicyLoader(
                    factory.spec, {**factory.kwargs, **variant.policy_kwargs}, factory.chunking
                )
            self._policies[variant.name] = factory(env)
        return self._policies[variant.name]

    def check(self, env_id: str) -> dict[str, Any]:
        """Build the env and every variant's policy and check compatibility (no step taken).

        Returns:
            ``{"env": env.describe(), "policy": ...}``: the policy's ``preflight(env)`` record
            (what a reproduction needs, e.g. OpenVLA's image pipeline and statistics key) for a
            policy that has one, else None; with several variants a dict by variant name.

        Raises:
            CompatibilityError: action dim / cameras / image size / convention mismatch, or a
                combination the policy's preflight refuses, naming it.
        """
        env = self.env(env_id)
        records: dict[str, Any] = {}
        for name, variant in self.variants.items():
            policy = self.policy(env, variant)
            check = getattr(policy, "preflight", None)
            if callable(check):
                records[name] = check(env)
            else:
                policy.check_compatible(env)
                records[name] = None
        policy_record = next(iter(records.values())) if len(records) == 1 else records
        return {"env": env.describe(), "policy": policy_record}

    def rollout_spec(
        self, spec: EpisodeSpec, env: Env, **kwargs: Any
    ) -> tuple[Episode, Steering | None]:
        """Roll ``spec`` out on ``env`` with its variant's policy and steering.

        Args:
            spec: The grid episode (variant, seed, reset options).
            env: The env for ``spec.env_id`` (from :meth:`env`).
            **kwargs: Further :func:`embodied.loop.rollout` arguments (e.g. ``callbacks``).

        Returns:
            ``(episode, steering)``; steering is None for an unsteered variant.
        """
        variant = self.variants[spec.variant]
        policy = self.policy(env, variant)
        steering = variant.steering(env, policy) if variant.steering is not None else None
        ep = rollout(
            env,
            policy,
            steering=steering,
            seed=spec.seed,
            reset_options=spec.reset_options,
            max_steps=self.max_steps,
            record_images=False,
            **kwargs,
            **dict(variant.rollout_kwargs),
        )
        return ep, steering

    def attempt(self, spec: EpisodeSpec) -> EpisodeRecord:
        """Run ``spec`` with :meth:`run`; an exception in the episode becomes its record.

        Backends call this. An exception raised anywhere in the episode (building the env,
        reset, policy, step, video, judge) gives ``EpisodeRecord(spec, success=False,
        error="Type: message" + the innermost frames)``; the episode then counts in ``n`` as
        a failure and in ``errors``. The env and policies stay cached (the next episode
        resets the env, as OpenVLA's evaluation does).

        Raises:
            EmbodiedError: one for which :func:`aborts_evaluation` holds (a configuration,
                compatibility, name or checkpoint error): the evaluation stops.
        """
        t0 = time.perf_counter()
        try:
            return self.run(spec)
        except Exception as exc:
            if aborts_evaluation(exc):
                raise
            return EpisodeRecord(
                spec=spec,
                error=describe_exception(exc),
                duration_s=time.perf_counter() - t0,
                worker=os.getpid(),
            )

    def run(self, spec: EpisodeSpec) -> EpisodeRecord:
        """Run one grid episode through :func:`embodied.loop.rollout` (exceptions propagate)."""
        t0 = time.perf_counter()
        env = self.env(spec.env_id)
        frames: list[np.ndarray] = []
        callbacks: list[Callable[[StepRecord], None]] = []
        if (spec.record_video and self.out is not None) or self.judge_spec:

            def grab(_: StepRecord) -> None:
                frames.append(np.asarray(env.render()))

            callbacks.append(grab)
        if self.record is not None:
            if self._recording is None:
                self._recording = McapRecorder(self.record, env.describe())
            self._recording.start_episode(
                seed=spec.seed,
                meta={"env_id": spec.env_id, "variant": spec.variant, "index": spec.index},
            )
            callbacks.append(self._recording)
        ep, _ = self.rollout_spec(spec, env, callbacks=callbacks)
        if self._recording is not None:
            self._recording.end_episode(success=ep.success, reason=str(ep.meta.get("reason")))
        judged = self._judge_episode(env, frames, ep.instruction) if self.judge_spec else None
        video = None
        if frames and self.out is not None and spec.record_video:
            rel = Path("videos") / video_name(spec)
            write_mp4(self.out / rel, frames, env.control_rate_hz)
            video = rel.as_posix()
        description = None
        if spec.env_id not in self._described:
            self._described.add(spec.env_id)
            description = env.describe()
        return EpisodeRecord(
            **record_fields(spec, ep, t0),
            video=video,
            env_description=description,
            judge_prob=None if judged is None else judged[0],
            judge_success=None if judged is None else judged[0] >= judged[1],
            judge_threshold=None if judged is None else judged[1],
        )

    def _judge_episode(
        self, env: Env, frames: list[np.ndarray], instruction: str
    ) -> tuple[float, float] | None:
        """(probability, threshold) of the final clip (4 earlier frames + the last) of an
        episode's rendered frames, or None without frames."""
        if not frames:
            return None
        if self._judge is None:
            self._judge = load_judge(str(self.judge_spec))
        n_context = int(getattr(self._judge, "n_frames", 5)) - 1
        clip = np.stack([frames[i] for i in context_indices(len(frames) - 1, n_context)])
        prob = float(self._judge.score(clip, task_text(instruction, env.env_id)))
        return prob, float(getattr(self._judge, "threshold", 0.5))

    def close_recording(self) -> None:
        """Finish the ``record`` file (its summary section), if one was opened."""
        if self._recording is not None:
            self._recording.close()
            self._recording = None

    def close(self) -> None:
        """Close the cached env and drop the policies built for it."""
        if self._env is not None:
            self._env.close()
        self._env = None
        self._env_id = ""
        self._policies = {}
