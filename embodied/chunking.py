"""Asynchronous chunk execution: the next chunk is computed while the current one executes.

:class:`AsyncChunks` wraps any :class:`~embodied.contracts.Policy` (in process or remote) and
is itself a policy, so the one loop (:func:`embodied.loop.rollout`) runs it unchanged. Actions
are scheduled by control step: a chunk planned from the observation of step ``t0`` holds the
actions of steps ``t0, t0 + 1, ...``. Each step:

1. A finished request is merged into the schedule: its rows for steps already executed are
   dropped (they are in the past), the rest are combined with what the schedule holds for the
   same steps by the named rule (:data:`MERGE_RULES`). A chunk with no row left is dropped
   whole, never executed.
2. When the actions left in the schedule fall to ``threshold`` x the chunk length and no
   request is in flight, a request goes out with this step's observation (lerobot's async
   inference: ``chunk_size_threshold``). ``threshold=0`` asks only when the schedule is empty:
   synchronous execution.
3. The action scheduled for this step is executed. Where none is (the first chunk, or
   inference slower than the chunk lasts), the step is a *missed control period*: the
   ``starve`` rule says what is sent instead (the last action again, or zeros), and the step
   is counted in :attr:`AsyncChunks.stats`.

A chunk asked for while the schedule was empty (the robot idle, waiting) starts executing
from its first row when it arrives; a chunk asked for while the previous one executes has its
rows tied to the steps after its observation, so the rows of the steps that passed during
inference are dropped (as in lerobot's async inference and in real-time chunking).

Latency is either real (``delay_steps=None``: the request runs in a worker thread and the
loop never waits for it while the schedule has actions) or simulated (``delay_steps=d``: the
chunk requested at step ``t0`` becomes available at step ``t0 + d``, whatever the wall clock
says), which makes latency experiments in simulation exact and reproducible.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from embodied.config import Rule, checked, validate
from embodied.contracts import Env, Knob, Policy, Steerable
from embodied.errors import CompatibilityError, ConfigError
from embodied.specs import Observation

MERGE_RULES: Mapping[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "latest_only": lambda old, new: new,
    "weighted_average": lambda old, new: 0.3 * old + 0.7 * new,
    "average": lambda old, new: 0.5 * (old + new),
    "conservative": lambda old, new: 0.7 * old + 0.3 * new,
}
"""How an action of a new chunk combines with the action the schedule holds for the same step
(``old``), by name: lerobot's async inference rules (``aggregate_fn_name``; its default is
``weighted_average``)."""

STARVE_RULES = ("repeat_last", "zeros")
"""What a missed control period sends: the last action again (what a position-controlled robot
holding its last target does) or zeros (a velocity-controlled robot stopping)."""


@dataclass
class ChunkStats:
    """What happened in one episode of asynchronous execution.

    Attributes:
        requests: Chunks requested.
        merged_chunks: Chunks merged into the schedule.
        dropped_chunks: Chunks that arrived with every row in the past (never executed).
        dropped_rows: Rows of merged chunks dropped because their step had passed.
        missed_periods: Steps with no scheduled action (``starve`` rule applied).
        boundary_steps: Steps at which the first action of a newly merged chunk executed.
    """

    requests: int = 0
    merged_chunks: int = 0
    dropped_chunks: int = 0
    dropped_rows: int = 0
    missed_periods: int = 0
    boundary_steps: list[int] = field(default_factory=list)


class AsyncChunks(Policy):
    """Execute ``policy``'s chunks asynchronously (see the module docstring).

    Args:
        policy: The wrapped policy; its :meth:`~embodied.contracts.Policy.fresh_chunk`
            answers each request.
        threshold: Request the next chunk when at most this fraction of a chunk is left
            (0: only when the schedule is empty, i.e. synchronous; lerobot's default 0.5).
        merge: How overlapping actions combine (:data:`MERGE_RULES`).
        delay_steps: Simulated latency in control steps (None: real latency, a worker thread).
        starve: What a missed control period sends (:data:`STARVE_RULES`).
        execute_steps: Rows of each chunk scheduled (None: all of them).
        rtc: Real-time chunking: a chunk asked for while the previous one executes is
            inpainted toward the previous chunk's remaining actions
            (:meth:`~embodied.contracts.Policy.guided_chunk`); its frozen rows are the
            inference delay, ``delay_steps`` when simulated, else the delay measured on the
            previous request (in control steps).
    """

    def __init__(
        self,
        policy: Policy,
        threshold: float = 0.5,
        merge: str = "weighted_average",
        delay_steps: int | None = None,
        starve: str = "repeat_last",
        execute_steps: int | None = None,
        rtc: bool = False,
    ) -> None:
        super().__init__()
        if rtc and not policy.supports_rtc:
            raise ConfigError(
                f"rtc=True but {type(policy).__name__} has no real-time chunking",
                fix="drop rtc, or use a diffusion policy (PDP/DP)",
            )
        if not 0.0 <= threshold < 1.0:
            raise ConfigError(
                f"threshold={threshold}: the fraction of a chunk left when the next is asked for "
                "must be in [0, 1)",
                fix="pass e.g. 0.5 (lerobot's default), or 0 for synchronous execution",
            )
        if merge not in MERGE_RULES:
            raise ConfigError(f"merge={merge!r} is unknown", fix=f"use one of {list(MERGE_RULES)}")
        if starve not in STARVE_RULES:
            raise ConfigError(f"starve={starve!r} is unknown", fix=f"use one of {STARVE_RULES}")
        if delay_steps is not None and delay_steps < 0:
            raise ConfigError(f"delay_steps={delay_steps} is negative", fix="pass 0 or more")
        if execute_steps is not None and execute_steps < 1:
            raise ConfigError(f"execute_steps={execute_steps}: must be >= 1", fix="pass 1 or more")
        self.policy = policy
        self.threshold = float(threshold)
        self.merge = merge
        self.delay_steps = delay_steps
        self.starve = starve
        self.execute_steps = execute_steps
        self.rtc = rtc
        self._measured_delay = 0
        self.action_dim = policy.action_dim
        self.image_keys = policy.image_keys
        self.image_size = policy.image_size
        self.image_orientation = policy.image_orientation
        self.gripper_convention = policy.gripper_convention
        self.stats = ChunkStats()
        self._t = 0
        self._schedule: dict[int, np.ndarray] = {}
        self._chunk_len = 0
        self._last: np.ndarray | None = None
        # (request step, future or chunk, asked with an empty schedule)
        self._pending: tuple[int, Any, bool] | None = None
        self._last_request_step = -1
        self._pool: cf.ThreadPoolExecutor | None = None

    # ---- lifecycle ---------------------------------------------------------------------------
    def reset(self) -> None:
        """Start an episode: empty schedule, no request in flight, fresh statistics."""
        super().reset()
        self._wait_pending()
        self.policy.reset()
        self._t = 0
        self._schedule = {}
        self._last = None
        self._pending = None
        self.stats = ChunkStats()

    def seed_episode(self, seed: int) -> None:
        """Seed the wrapped policy's episode."""
        self.policy.seed_episode(seed)

    def close(self) -> None:
        """Stop the worker thread."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def check_compatible(self, env: Env) -> None:
        """The wrapped policy's checks."""
        self.policy.check_compatible(env)

    # ---- knobs pass through --------------------------------------------------------------------
    def knobs(self) -> Mapping[str, Knob]:
        """The wrapped policy's knobs (none if it is not steerable)."""
        return self.policy.knobs() if isinstance(self.policy, Steerable) else {}

    def set_knob(self, name: str, value: float | Sequence[float] | np.ndarray) -> None:
        """Set a knob of the wrapped policy (it takes effect from the next request)."""
        if not isinstance(self.policy, Steerable):
            raise CompatibilityError(f"{type(self.policy).__name__} has no knobs")
        self.policy.set_knob(name, value)

    def get_knob(self, name: str) -> np.ndarray:
        """A knob of the wrapped policy."""
        if not isinstance(self.policy, Steerable):
            raise CompatibilityError(f"{type(self.policy).__name__} has no knobs")
        return self.policy.get_knob(name)

    # ---- execution -----------------------------------------------------------------------------
    def predict_action_chunk(self, obs: Observation) -> np.ndarray:
        """A fresh chunk of the wrapped policy (synchronous; not used by :meth:`select_action`)."""
        return self.policy.fresh_chunk(obs)

    def select_action(self, obs: Observation) -> np.ndarray:
        """The action of this control step (see the module docstring)."""
        t = self._t
        self._collect(t, block=False)
        if not self._schedule_left(t):
            if self._pending is None:
                self._request(t, obs)
                self._collect(t, block=self.delay_steps is None)  # real latency: wait
            elif self.delay_steps is None:
                self._collect(t, block=True)
        elif self._pending is None and self._schedule_left(t) <= self.threshold * self._chunk_len:
            self._request(t, obs)
            self._collect(t, block=False)  # a zero-step simulated delay arrives at once
        if (
            self.policy.history_steps > 1
            and self._last_request_step != t  # a request records its own observation
            and (self.delay_steps is not None or self._pending is None)
        ):
            # a policy with a history records every step's observation; not while a worker
            # thread plans with it (that step is then left out of its history)
            self.policy.observe(obs)
        if t not in self._schedule:
            self.stats.missed_periods += 1
            if self._last is None or self.starve == "zeros":
                action = np.zeros(self.action_dim)
            else:
                action = self._last
        else:
            action = self._schedule.pop(t)
        self._last = np.asarray(action, dtype=np.float64)
        self._t = t + 1
        return self._last

    def _schedule_left(self, t: int) -> int:
        return sum(1 for s in self._schedule if s >= t)

    def _request(self, t: int, obs: Observation) -> None:
        self.stats.requests += 1
        self._last_request_step = t
        idle = not self._schedule_left(t)
        call: Callable[..., np.ndarray] = self.policy.fresh_chunk
        args: tuple[Any, ...] = (dict(obs),)
        if self.rtc and not idle:
            prefix = np.stack([self._schedule[s] for s in sorted(self._schedule) if s >= t])
            delay = self.delay_steps if self.delay_steps is not None else self._measured_delay
            call, args = self.policy.guided_chunk, (dict(obs), prefix, delay)
        if self.delay_steps is not None:
            self._pending = (t, call(*args), idle)
            return
        if self._pool is None:
            self._pool = cf.ThreadPoolExecutor(1, thread_name_prefix="embodied-chunks")
        self._pending = (t, self._pool.submit(call, *args), idle)

    def _collect(self, t: int, block: bool) -> None:
        """Merge the request in flight into the schedule once it has arrived."""
        if self._pending is None:
            return
        t0, result, idle = self._pending
        if self.delay_steps is not None:
            if t < t0 + self.delay_steps:
                return  # still "computing"
            chunk = result
        else:
            if not block and not result.done():
                return
            chunk = result.result()
        self._pending = None
        if not idle:
            self._measured_delay = t - t0
        chunk = np.asarray(chunk, dtype=np.float64)
        if chunk.ndim != 2 or chunk.shape[1] != self.action_dim:
            raise CompatibilityError(
                f"{type(self.policy).__name__}.fresh_chunk returned shape {chunk.shape}, "
                f"expected (n_steps, {self.action_dim})"
            )
        if self.execute_steps is not None:
            chunk = chunk[: self.execute_steps]
        self._chunk_len = max(self._chunk_len, len(chunk))
        # asked while idle, the robot waited: the chunk starts when it arrives (its first row
        # is still the right one). Asked while executing, the robot moved on: row k belongs
        # to step t0 + k, and the rows of the steps that passed are stale.
        start = t if idle else t0
        rows = [(start + k, row) for k, row in enumerate(chunk) if start + k >= t]
        self.stats.dropped_rows += len(chunk) - len(rows)
        if not rows:
            self.stats.dropped_chunks += 1
            return
        rule = MERGE_RULES[self.merge]
        for step, row in rows:
            old = self._schedule.get(step)
            self._schedule[step] = row if old is None else rule(old, row)
        self._schedule = {s: a for s, a in self._schedule.items() if s >= t}
        self.stats.merged_chunks += 1
        self.stats.boundary_steps.append(rows[0][0])

    def _wait_pending(self) -> None:
        if self._pending is not None and self.delay_steps is None:
            cf.wait([self._pending[1]])


EXECUTIONS = ("policy", "sync", "async")
"""How chunks execute: ``policy`` (the policy's own receding horizon, its ``n_action_steps``),
``sync`` (whole chunks, the next asked for when one ends; with ``delay_steps`` the robot
waits) and ``async`` (:class:`AsyncChunks` with a threshold)."""


@dataclass(frozen=True)
class ChunkingConfig:
    """Chunk execution settings of ``eval`` and ``deploy`` (see :class:`AsyncChunks`).

    Args:
        execution: ``policy``, ``sync`` or ``async`` (:data:`EXECUTIONS`).
        threshold: ``async``: ask for the next chunk when this fraction of a chunk is left.
        merge: ``async``: how overlapping actions combine (:data:`MERGE_RULES`).
        delay_steps: Simulated inference latency in control steps (None: real latency).
        rtc: ``async``: real-time chunking (diffusion policies).
        starve: What a missed control period sends (:data:`STARVE_RULES`).
        execute_steps: Rows of each chunk executed before the next is asked for, in every
            execution (None: the policy's own ``n_action_steps`` under ``policy``, the whole
            chunk under ``sync``/``async``). An inference setting, as in Chi et al.: fewer
            re-plan more often.
    """

    config_name: ClassVar[str] = "chunking"

    execution: str = checked("policy", choices=EXECUTIONS)
    threshold: float = 0.5
    merge: str = "weighted_average"
    delay_steps: int | None = None
    rtc: bool = False
    starve: str = "repeat_last"
    execute_steps: int | None = None

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "execution",
            lambda c: c.execution != "policy" or (c.delay_steps is None and not c.rtc),
            "runs the policy in the loop: delay_steps={delay_steps} and rtc={rtc} need chunked "
            "execution",
            "pass --execution sync or --execution async",
        ),
        Rule(
            "rtc",
            lambda c: not c.rtc or c.execution == "async",
            "needs asynchronous execution",
            "pass --execution async",
        ),
        Rule(
            "execute_steps",
            lambda c: c.execute_steps is None or c.execute_steps >= 1,
            "must be at least 1",
            "pass --execute-steps 1 or more, or drop it",
        ),
    )

    def __post_init__(self) -> None:
        validate(self)

    def wrap(self, policy: Policy) -> Policy:
        """``policy`` executed as configured (itself for ``execution='policy'``, re-planning
        every ``execute_steps`` rows when that is set).

        Raises:
            ConfigError: ``execute_steps`` exceeds the rows of the policy's chunks.
        """
        limit = policy.chunk_length
        if self.execute_steps is not None and limit is not None and self.execute_steps > limit:
            raise ConfigError(
                f"chunking execute_steps={self.execute_steps} exceeds the {limit} rows of each "
                f"chunk {type(policy).__name__} predicts",
                fix=f"pass --execute-steps between 1 and {limit}, or drop it",
            )
        if self.execution == "policy":
            if self.execute_steps is not None:
                policy.n_action_steps = self.execute_steps
            return policy
        return AsyncChunks(
            policy,
            threshold=self.threshold if self.execution == "async" else 0.0,
            merge=self.merge,
            delay_steps=self.delay_steps,
            starve=self.starve,
            execute_steps=self.execute_steps,
            rtc=self.rtc,
        )
