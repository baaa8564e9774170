"""``embodied bench eval``: evaluation throughput and parallel efficiency of the harness.

Runs the same episode grid of the scripted expert on ``mujoco:arm_reach`` (no camera) through
:func:`embodied.evaluation.evaluate` with the ``local`` backend, once with 1 worker process
and once with K = 2, and reports:

* ``episodes_per_s_1`` / ``episodes_per_s_2``: steady-state episodes per second; the clock
  starts once every worker has finished its first episode (so process start-up, imports and
  the first env build are excluded) and stops at the last finished episode;
* ``eval_parallel_efficiency``: ``episodes_per_s_2 / (2 * episodes_per_s_1)`` (1.0 = perfect
  scaling; it can only approach 1 with >= 2 idle cores: see ``cpu_count`` and ``load_avg_1m``);
* ``episode_ms_p50``: median wall time of one episode inside a worker (ms).
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

ENV_ID = "mujoco:arm_reach"


def episodes_per_s(workers: int, episodes: int, seed: int = 0) -> tuple[float, list[float]]:
    """Steady-state episodes/s of ``workers`` local worker processes, and episode times (s).

    The clock starts once every worker has finished its first episode (process start,
    imports and env build excluded) and stops at the last finished episode.
    """
    from embodied.evaluation import EvalConfig, evaluate

    done: list[tuple[float, int]] = []

    def on_event(kind: str, data: dict[str, Any]) -> None:
        if kind == "done":
            done.append((time.perf_counter(), data["record"].worker))

    config = EvalConfig(
        envs=(ENV_ID,),
        episodes=episodes,
        workers=workers,
        seed=seed,
        env_kwargs={"mujoco": {"camera": False}},
        preflight=False,
    )
    result = evaluate(config, "expert", on_event)
    first: dict[int, float] = {}
    for t, pid in done:
        first.setdefault(pid, t)
    t0 = max(first.values())
    after = [t for t, _ in done if t > t0]
    rate = len(after) / (after[-1] - t0) if after else float("nan")
    return rate, [e.duration_s for e in result.episodes]


def run(quick: bool = False) -> dict[str, Any]:
    """Episodes/s with 1 and 2 workers and their ratio (see the module docstring)."""
    n = 40 if quick else 400
    r1, d1 = episodes_per_s(1, n)
    r2, d2 = episodes_per_s(2, n)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return {
        "env": ENV_ID,
        "episodes": n,
        "episodes_per_s_1": r1,
        "episodes_per_s_2": r2,
        "eval_parallel_efficiency": r2 / (2.0 * r1),
        "episode_ms_p50": 1e3 * statistics.median(d1 + d2),
        "cpu_count": os.cpu_count(),
        "load_avg_1m": load,
    }
