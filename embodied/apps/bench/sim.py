"""``embodied bench sim``: adapter speed of the MuJoCo tasks against a bare ``mj_step`` loop.

For each ``mujoco:<task>`` this reports (medians over repeats, 1 thread):

* ``adapter_steps_per_s``: ``env.step`` calls per second (no camera), replaying a fixed
  smooth action sequence;
* ``raw_steps_per_s``: control steps per second of a bare loop on a second copy of the same
  model: write the controls the adapter produced at that step into ``data.ctrl``, then
  ``mujoco.mj_step(model, data, substeps)``; no observation, no rendering;
* ``overhead``: raw / adapter (target <= 1.5);
* ``render_ms``: one render of the task's default camera at its default size (ms).

When ``embodied.apps.bench._libero`` is importable its ``rows(quick)`` are merged in; when it is not
(the ``libero`` extra is missing) the row ``libero`` holds ``{"error": ...}``, so the report
counts the LIBERO targets as missing instead of dropping them.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import time
from typing import Any

import numpy as np

import sim
from sim.mujoco import TASKS


def _actions(spec_low: np.ndarray, spec_high: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    """A smooth action sequence (sums of slow sinusoids) at 60% of the bounds."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)[:, None]
    freq = rng.uniform(0.01, 0.05, size=(1, spec_low.size))
    phase = rng.uniform(0, 2 * np.pi, size=(1, spec_low.size))
    mid, half = (spec_high + spec_low) / 2, (spec_high - spec_low) / 2
    return mid + 0.6 * half * np.sin(2 * np.pi * freq * t + phase)


def bench_task(task: str, steps: int, repeats: int, render_reps: int) -> dict[str, float]:
    """Benchmark one MuJoCo task; see the module docstring for the fields."""
    import mujoco

    env: Any = sim.make(
        f"mujoco:{task}", camera=False, max_episode_steps=10**9, terminate_on_success=False
    )
    base = env.unwrapped
    actions = _actions(base.action_spec.low_array, base.action_spec.high_array, steps)

    # record the controls the adapter writes, to replay them in the bare loop
    env.reset(seed=0)
    qpos0, qvel0 = base.data.qpos.copy(), base.data.qvel.copy()
    mocap0 = base.data.mocap_pos.copy()
    ctrls = np.empty((steps, base.model.nu))
    for i, a in enumerate(actions):
        env.step(a)
        ctrls[i] = base.data.ctrl

    model = base.model  # the same compiled model (scene edits included), its own data
    data = mujoco.MjData(model)
    substeps = base.substeps

    adapter, raw = [], []
    for _ in range(repeats):
        env.reset(seed=0)
        step = env.step
        t0 = time.perf_counter()
        for a in actions:
            step(a)
        adapter.append(steps / (time.perf_counter() - t0))

        mujoco.mj_resetData(model, data)
        data.qpos[:], data.qvel[:], data.mocap_pos[:] = qpos0, qvel0, mocap0
        mujoco.mj_forward(model, data)
        mj_step, ctrl = mujoco.mj_step, data.ctrl
        t0 = time.perf_counter()
        for c in ctrls:
            ctrl[:] = c
            mj_step(model, data, substeps)
        raw.append(steps / (time.perf_counter() - t0))

    row = {
        "adapter_steps_per_s": statistics.median(adapter),
        "raw_steps_per_s": statistics.median(raw),
        "substeps": substeps,
        "control_rate_hz": base.control_rate_hz,
    }
    row["overhead"] = row["raw_steps_per_s"] / row["adapter_steps_per_s"]
    if base.task.cameras:
        cam = base.task.cameras[0]
        h, w = base.task.default_image_size
        cam_env: Any = sim.make(f"mujoco:{task}", camera=[cam], image_size=(h, w))
        cam_env.reset(seed=0)
        cam_env.render()  # create the GL context outside the timing
        times = []
        for _ in range(render_reps):
            t0 = time.perf_counter()
            cam_env.render()
            times.append((time.perf_counter() - t0) * 1e3)
        row["render_ms"] = statistics.median(times)
        row["render_camera"] = f"{cam} {h}x{w}"
        cam_env.close()
    return row


def run(quick: bool = False) -> dict[str, Any]:
    """Rows keyed by env id (``mujoco:<task>``, plus LIBERO rows when available)."""
    steps, repeats, render_reps = (400, 3, 10) if quick else (2000, 7, 50)
    result: dict[str, Any] = {
        f"mujoco:{name}": bench_task(name, steps, repeats, render_reps) for name in sorted(TASKS)
    }
    try:
        from embodied.apps.bench import _libero as libero_bench  # optional libero extra
    except ImportError as exc:
        result["libero"] = {"error": f"LIBERO rows not measured: ImportError: {exc}"}
        return result
    # keep stdout one JSON object: LIBERO prints progress (asset lookups) to stdout
    with contextlib.redirect_stdout(sys.stderr):
        result.update(libero_bench.rows(quick))
    return result
