"""Configuration of an evaluation: what to run (the episode grid) and how (workers, outputs).

The grid is explicit: :func:`embodied.apps.evaluation.grid.build_grid` turns an
:class:`EvalConfig` into a list of :class:`EpisodeSpec` (task x episode/seed/init state x
variant), each of which is self-contained, so any backend (local processes now, Ray later)
can run any episode anywhere and rerun it identically after a crash.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import policies
from embodied.chunking import ChunkingConfig
from embodied.config import Rule, checked, validate
from embodied.contracts import Env, Policy
from embodied.recording import check_record_path

_RESERVED_ROLLOUT_KWARGS = frozenset(
    {"seed", "reset_options", "max_steps", "steering", "callbacks"}
)
"""Rollout arguments the harness sets itself (an :class:`EvalVariant` may not)."""

SCENES = ("fixed", "sampled")
"""Values of :attr:`EvalConfig.scenes`."""

PolicyFactory = Callable[[Env], Policy]
"""Builds a policy for an env (called in the worker process; must be picklable)."""


@dataclass(frozen=True)
class PolicyLoader:
    """A picklable policy factory: ``policies.load(spec, env=env, **kwargs)``.

    Args:
        spec: A registered policy name (``random``, ``expert``) or a checkpoint folder.
        kwargs: Extra keyword arguments for the factory or checkpoint loader.
        chunking: How its chunks execute (synchronous or asynchronous, simulated latency,
            real-time chunking); default: the policy's own receding horizon.
    """

    spec: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    chunking: ChunkingConfig = field(default_factory=ChunkingConfig)

    def __call__(self, env: Env) -> Policy:
        return self.chunking.wrap(policies.load(self.spec, env=env, **dict(self.kwargs)))

    def describe(self) -> dict[str, Any]:
        """JSON form for result files."""
        out: dict[str, Any] = {"spec": str(self.spec), "kwargs": dict(self.kwargs)}
        if self.chunking != ChunkingConfig():
            out["chunking"] = dataclasses.asdict(self.chunking)
        return out


@dataclass(frozen=True)
class EvalVariant:
    """One setting of the optional controller/steering axis of the grid.

    Args:
        name: Label in result tables (``default`` when there is one variant).
        steering: ``steering(env, policy) -> Steering | None`` (picklable, called in the
            worker per episode), e.g. a knob controller at a setpoint.
        policy_kwargs: Extra kwargs for the policy factory when it is a :class:`PolicyLoader`.
        rollout_kwargs: Extra kwargs for :func:`embodied.loop.rollout` (e.g. ``safety``).
    """

    config_name: ClassVar[str] = "variant"

    name: str = checked("default", min_len=1, fix="name the variant, e.g. 'pid'")
    steering: Callable[[Env, Policy], Any] | None = None
    policy_kwargs: Mapping[str, Any] = field(default_factory=dict)
    rollout_kwargs: Mapping[str, Any] = field(default_factory=dict)

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "name",
            lambda c: "/" not in c.name,
            "must not contain '/' (it names a folder)",
            "name the variant without '/', e.g. 'pid_0.3'",
        ),
        Rule(
            "rollout_kwargs",
            lambda c: not _RESERVED_ROLLOUT_KWARGS & set(c.rollout_kwargs),
            lambda c: (
                f"of variant {c.name!r} sets "
                f"{sorted(_RESERVED_ROLLOUT_KWARGS & set(c.rollout_kwargs))}, which the harness "
                "controls"
            ),
            "set seeds via EvalConfig.seed, steps via EvalConfig.max_steps",
        ),
    )

    def __post_init__(self) -> None:
        validate(self)

    def describe(self) -> dict[str, Any]:
        """JSON form for result files."""
        return {
            "name": self.name,
            "steering": None if self.steering is None else repr(self.steering),
            "policy_kwargs": dict(self.policy_kwargs),
            "rollout_kwargs": {k: repr(v) for k, v in self.rollout_kwargs.items()},
        }


@dataclass(frozen=True)
class EvalConfig:
    """An evaluation.

    Args:
        envs: Env ids; a suite id (``libero:libero_spatial``) expands to all its tasks.
        episodes: Episodes per task and variant; None: the family default (LIBERO: 50, one
            per fixed init state; others: 10).
        workers: Worker processes (0: run in this process, for debugging).
        out: Output folder for ``results.json``, ``results.md`` and ``videos/`` (None: none).
        video_episodes: Episode indices (within each task/variant) to save as MP4.
        seed: Base seed; episode ``k`` of a task uses ``seed + k``.
        env_kwargs: Family name -> kwargs for ``sim.make`` (e.g. ``{"libero": {"cameras":
            ("agentview",)}}``).
        max_steps: Step limit per episode; None: the env's ``max_episode_steps`` (protocol).
        variants: The controller/steering axis; one ``default`` variant by default.
        backend: Execution backend name (``local`` process pool, ``inline``, ``ray``).
        max_retries: Reruns of an episode whose worker died before it is marked failed.
        start_method: Multiprocessing start method (``forkserver`` or ``spawn``; never
            ``fork``: simulators and GL contexts do not survive it).
        preflight: Build one env per group in the parent and check policy compatibility
            before starting workers.
        judge: Optional judge spec (``minijudge``, a checkpoint folder, ...) that scores each
            episode's final clip; results then report judge-vs-oracle agreement.
        max_episode_errors: Stop the evaluation (``EvaluationError``) once more than this
            many episodes failed to run to their end (raised, or their worker died); None:
            never stop, every such episode counts in n as a failure.
        scenes: Where episodes of a family with fixed init states (LIBERO) start: ``fixed``
            (episode k from init state k mod N, the benchmark's protocol) or ``sampled``
            (development scenes: the placement the family samples itself with seed
            ``seed + k``, never one of the fixed init states; pick seeds apart from the
            training data's). Families without fixed init states ignore it.
        chunking: How the policy's chunks execute (``embodied eval --execution async``):
            copied into a :class:`PolicyLoader` by the CLI; a loader given to
            :func:`~embodied.apps.evaluation.evaluate` keeps its own.
        record: MCAP file recording every control step of every episode
            (:mod:`embodied.recording`; never overwritten). Needs ``workers=0``: the episodes
            then run in this process, which owns the file.

    Derived:
        env_ids: ``envs`` as a tuple.
    """

    config_name: ClassVar[str] = "evaluation"

    envs: Sequence[str] | str
    episodes: int | None = checked(None, ge=1, fix="pass a positive number of episodes")
    workers: int = checked(1, ge=0, fix="0 runs inline")
    out: str | os.PathLike[str] | None = None
    video_episodes: Sequence[int] = checked((), ge=0, fix="pass episode indices >= 0")
    seed: int = 0
    env_kwargs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    max_steps: int | None = checked(None, ge=1, fix="pass a positive step limit, or none")
    variants: Sequence[EvalVariant] = (EvalVariant(),)
    backend: str = "local"
    max_retries: int = checked(2, ge=0, fix="use e.g. 2 (0: never rerun)")
    start_method: str = checked(
        "forkserver",
        choices=("forkserver", "spawn"),
        fix="use 'forkserver' or 'spawn': fork copies simulator and GL state into workers "
        "and breaks them",
    )
    preflight: bool = True
    judge: str | None = None
    max_episode_errors: int | None = checked(
        None, ge=0, fix="0 stops at the first failed episode; None never stops"
    )
    scenes: str = checked(
        "fixed",
        choices=SCENES,
        fix=f"use one of {SCENES}: fixed init states (the benchmark) or sampled ones",
    )
    chunking: ChunkingConfig = field(default_factory=ChunkingConfig)
    record: str | os.PathLike[str] | None = None
    env_ids: tuple[str, ...] = field(init=False)

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "envs",
            lambda c: bool(c.env_ids) and all(isinstance(e, str) and e for e in c.env_ids),
            "must name at least one env id",
            "e.g. envs=('libero:libero_spatial',) or 'mujoco:reach_around'",
        ),
        Rule(
            "record",
            lambda c: c.record is None or c.workers == 0,
            "with workers={workers}: one process writes a recording",
            "add --workers 0 (the episodes run in this process)",
        ),
        Rule(
            "video_episodes",
            lambda c: all(isinstance(v, int) for v in c.video_episodes),
            "must be episode indices (ints)",
            "pass episode indices >= 0",
        ),
        Rule(
            "video_episodes",
            lambda c: not c.video_episodes or c.out is not None,
            "but no out folder to write them to",
            "pass --out DIR (videos go to DIR/videos/) or drop --video-episodes",
        ),
        Rule(
            "video_episodes",
            lambda c: c.episodes is None or all(v < c.episodes for v in c.video_episodes),
            lambda c: (
                "name episodes past the last one "
                f"(episodes={c.episodes}: indices 0..{c.episodes - 1})"
            ),
            lambda c: f"pass --video-episodes indices below {c.episodes}",
        ),
        Rule(
            "variants",
            lambda c: bool(c.variants) and len({v.name for v in c.variants}) == len(c.variants),
            lambda c: f"must be non-empty with unique names, got {[v.name for v in c.variants]}",
            "name each variant once",
        ),
    )

    def __post_init__(self) -> None:
        ids = (self.envs,) if isinstance(self.envs, str) else tuple(self.envs)
        object.__setattr__(self, "env_ids", tuple(dict.fromkeys(ids)))
        object.__setattr__(self, "variants", tuple(self.variants))
        if all(isinstance(v, int) for v in self.video_episodes):
            object.__setattr__(self, "video_episodes", tuple(sorted(set(self.video_episodes))))
        validate(self)
        if self.record is not None:
            check_record_path(self.record)
        object.__setattr__(
            self, "env_kwargs", {k: dict(v) for k, v in dict(self.env_kwargs).items()}
        )
        if self.out is not None:
            object.__setattr__(self, "out", Path(self.out))

    def describe(self) -> dict[str, Any]:
        """JSON form for result files."""
        return {
            "envs": list(self.env_ids),
            "episodes": self.episodes,
            "workers": self.workers,
            "out": None if self.out is None else str(self.out),
            "video_episodes": list(self.video_episodes),
            "seed": self.seed,
            "env_kwargs": {
                k: {kk: repr(vv) for kk, vv in v.items()} for k, v in self.env_kwargs.items()
            },
            "max_steps": self.max_steps,
            "variants": [v.describe() for v in self.variants],
            "backend": self.backend,
            "max_retries": self.max_retries,
            "start_method": self.start_method,
            "judge": self.judge,
            "max_episode_errors": self.max_episode_errors,
            "scenes": self.scenes,
        }


@dataclass(frozen=True)
class EpisodeSpec:
    """One cell of the episode grid: everything needed to run (or rerun) one episode.

    Attributes:
        index: Position in the grid (results are keyed by it).
        env_id: Full env id of one task (``libero:libero_spatial:3``).
        group: Averaging group (``libero:libero_spatial``; the env id for single tasks).
        episode: Episode number within (task, variant).
        seed: Reset seed.
        init_state: Fixed init-state index (LIBERO) or None.
        variant: Name of the :class:`EvalVariant`.
        reset_options: Passed to ``env.reset`` (``{"init_state": i}`` for LIBERO).
        record_video: Save this episode as MP4.
    """

    index: int
    env_id: str
    group: str
    episode: int
    seed: int
    init_state: int | None
    variant: str
    reset_options: Mapping[str, Any]
    record_video: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "index": self.index,
            "env_id": self.env_id,
            "group": self.group,
            "episode": self.episode,
            "seed": self.seed,
            "init_state": self.init_state,
            "variant": self.variant,
            "reset_options": dict(self.reset_options),
            "record_video": self.record_video,
        }
