"""``embodied bench eval``: evaluation throughput and parallel efficiency of the harness.

Runs the same episode grid of the scripted expert on ``mujoco:arm_reach`` (no camera) through
:func:`embodied.apps.evaluation.evaluate` with the ``local`` backend, once with 1 worker process
and once with K = 2, and reports:

* ``episodes_per_s_1`` / ``episodes_per_s_2``: steady-state episodes per second while every
  worker is at work: from the moment the last worker starts its first episode (so process
  start-up, imports and the first env build are excluded) to the moment the first worker
  finishes its last one; an episode partly outside that window counts by its part inside;
* ``eval_parallel_efficiency``: ``episodes_per_s_2 / (2 * episodes_per_s_1)`` (1.0 = perfect
  scaling; it can only approach 1 with >= 2 idle cores: see ``cpu_count`` and ``load_avg_1m``);
* ``episode_ms_p50``: median wall time of one episode inside a worker (ms);
* ``workers_1`` / ``workers_2``: distinct worker processes that finished episodes;
* ``concurrency_1`` / ``concurrency_2``: mean number of episodes in progress inside workers
  during the timed window (each episode's in-worker wall time, ending when its record
  arrived, clipped to the window). Wall time includes waiting for a CPU, so K working
  workers keep it near K even on a loaded machine, while episodes that run one after the
  other (a serialised pool) keep it <= 1: it tells parallel execution from slow execution.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from typing import Any

from embodied.apps.evaluation import EvalConfig, evaluate

ENV_ID = "mujoco:arm_reach"


@dataclass(frozen=True)
class Timing:
    """One timed evaluation run (see the module docstring).

    Attributes:
        rate: Steady-state episodes per second.
        durations_s: In-worker wall time of every episode (s).
        workers: Distinct worker processes that finished episodes.
        concurrency: Mean number of episodes in progress during the timed window.
    """

    rate: float
    durations_s: list[float]
    workers: int
    concurrency: float


def timed_run(workers: int, episodes: int, seed: int = 0) -> Timing:
    """Time ``episodes`` of the expert on ``workers`` local worker processes.

    The clock runs while every worker is at work (see the module docstring).
    """
    done: list[tuple[float, int, float]] = []  # (arrival s, worker pid, in-worker duration s)

    def on_event(kind: str, data: dict[str, Any]) -> None:
        if kind == "done":
            record = data["record"]
            done.append((time.perf_counter(), record.worker, record.duration_s))

    config = EvalConfig(
        envs=(ENV_ID,),
        episodes=episodes,
        workers=workers,
        seed=seed,
        env_kwargs={"mujoco": {"camera": False}},
        preflight=False,
    )
    result = evaluate(config, "expert", on_event)
    # The window is the time every worker is at work: it opens when the last worker starts
    # its first episode (after its process start, imports and env build) and closes when
    # the first worker finishes its last one. A worker that starts late on a loaded machine
    # shortens the window; an episode partly outside it counts by the part inside.
    first_start: dict[int, float] = {}
    last_end: dict[int, float] = {}
    for t, pid, d in done:
        first_start.setdefault(pid, t - d)
        last_end[pid] = t
    t0, t1 = max(first_start.values()), min(last_end.values())
    inside = [min(t, t1) - max(t - d, t0) for t, _, d in done]
    parts = [(part, d) for part, (_, _, d) in zip(inside, done, strict=True) if part > 0]
    durations = [e.duration_s for e in result.episodes]
    if t1 <= t0 or not parts:  # no moment with every worker at work: nothing ran in parallel
        return Timing(float("nan"), durations, len(first_start), 0.0)
    return Timing(
        rate=sum(part / d for part, d in parts) / (t1 - t0),
        durations_s=durations,
        workers=len(first_start),
        concurrency=sum(part for part, _ in parts) / (t1 - t0),
    )


def run(quick: bool = False) -> dict[str, Any]:
    """Episodes/s with 1 and 2 workers and their ratio (see the module docstring)."""
    # an episode lasts ~6 ms: enough of them that worker start-up jitter (up to seconds on a
    # loaded machine) leaves a long window with every worker at work
    n = 300 if quick else 2000
    one = timed_run(1, n)
    two = timed_run(2, n)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return {
        "env": ENV_ID,
        "episodes": n,
        "episodes_per_s_1": one.rate,
        "episodes_per_s_2": two.rate,
        "eval_parallel_efficiency": two.rate / (2.0 * one.rate),
        "episode_ms_p50": 1e3 * statistics.median(one.durations_s + two.durations_s),
        "workers_1": one.workers,
        "workers_2": two.workers,
        "concurrency_1": one.concurrency,
        "concurrency_2": two.concurrency,
        "cpu_count": os.cpu_count(),
        "load_avg_1m": load,
    }
