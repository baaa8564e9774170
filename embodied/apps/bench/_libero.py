"""LIBERO speed figures: our adapter vs the raw LIBERO env on the same task.

:func:`rows` returns, per suite (its task 0), ``libero:<suite>`` (no cameras) and
``libero:<suite>:cam`` (agentview at 256 px) with:

* ``adapter_steps_per_s`` / ``raw_steps_per_s``: control steps per second through
  :class:`~sim.libero.env.LiberoEnv.step` and through LIBERO's ``OffScreenRenderEnv.step``,
  measured on the same instance in interleaved blocks of 5 steps (medians of step times);
* ``overhead``: median over steps of (adapter step time / the raw LIBERO step inside it),
  a paired ratio that stays meaningful on a loaded machine (target <= 1.05);
  ``overhead_unpaired`` is ``raw_steps_per_s / adapter_steps_per_s`` (noisier);
* ``reset_s``: median ``reset(options={"init_state": i})`` incl. the 10 wait steps (s);
* ``render_ms``: median cost of one 256 px agentview frame (ms).

``embodied bench sim`` merges these rows; ``python -m embodied.apps.bench._libero`` prints them alone.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from sim.libero.configuration_libero import SUITES
from sim.libero.env import LiberoEnv
from sim.libero.resources import ASSETS_ENV_VAR


def _median_rate(times: list[float], steps: int) -> float:
    return float(steps / np.median(times)) if times else float("nan")


def _row(suite: str, cameras: tuple[str, ...], steps: int, resets: int) -> dict[str, Any]:
    env = LiberoEnv(f"{suite}:0", cameras=cameras)
    try:
        reset_times = []
        for i in range(resets):
            t = time.perf_counter()
            env.reset(options={"init_state": i})
            reset_times.append(time.perf_counter() - t)
        rng = np.random.default_rng(0)
        actions = rng.uniform(-0.3, 0.3, size=(steps, 7))
        actions[:, 6] = -1.0
        block = 5
        raw_t: list[float] = []
        ada_t: list[float] = []
        raw = env.raw_env
        inner: list[float] = []  # the raw step inside each adapter step (paired timing)
        raw_step = raw.step

        def timed_step(a: np.ndarray) -> Any:
            t0 = time.perf_counter()
            out = raw_step(a)
            inner.append(time.perf_counter() - t0)
            return out

        ratios: list[float] = []
        for start in range(0, steps - block + 1, 2 * block):
            raw.step = timed_step
            try:
                for a in actions[start : start + block]:
                    t = time.perf_counter()
                    env.step(a)
                    dt = time.perf_counter() - t
                    ada_t.append(dt)
                    ratios.append(dt / inner[-1])
            finally:
                del raw.step  # back to the class method
            for a in actions[start + block : start + 2 * block]:
                t = time.perf_counter()
                raw.step(a)
                raw_t.append(time.perf_counter() - t)
        render_t = []
        size = env.protocol.render_size
        for _ in range(3 if steps < 100 else 10):
            t = time.perf_counter()
            raw.sim.render(camera_name="agentview", height=size, width=size)
            render_t.append(time.perf_counter() - t)
        adapter = _median_rate(ada_t, 1)
        raw_rate = _median_rate(raw_t, 1)
        return {
            "env_id": env.env_id,
            "cameras": list(cameras),
            "adapter_steps_per_s": round(adapter, 2),
            "raw_steps_per_s": round(raw_rate, 2),
            "overhead": round(float(np.median(ratios)), 4),
            "overhead_unpaired": round(raw_rate / adapter, 3),
            "reset_s": round(float(np.median(reset_times)), 3),
            "render_ms": round(1e3 * float(np.median(render_t)), 1),
            "steps": steps,
            "resets": resets,
        }
    finally:
        env.close()


def rows(quick: bool = False, suites: tuple[str, ...] = SUITES) -> dict[str, Any]:
    """Bench rows ``libero:<suite>`` and ``libero:<suite>:cam`` (see module docstring).

    Needs the LIBERO assets (``$EMBODIED_LIBERO_ASSETS``, else ``../shared/libero-assets``
    beside the checkout, else the hub); a suite that cannot be built gets ``{"error": ...}``.
    """
    steps, cam_steps, resets = (40, 20, 2) if quick else (400, 100, 5)
    shared = Path(__file__).resolve().parents[2].parent / "shared" / "libero-assets"
    if not os.environ.get(ASSETS_ENV_VAR) and shared.is_dir():  # a checkout beside ../shared
        os.environ[ASSETS_ENV_VAR] = str(shared)
    out: dict[str, Any] = {}
    for suite in suites:
        for key, cams, n in (
            (f"libero:{suite}", (), steps),
            (f"libero:{suite}:cam", ("agentview",), cam_steps),
        ):
            try:
                out[key] = _row(suite, cams, n, resets)
            except Exception as exc:  # report, don't abort the other rows
                out[key] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def run(quick: bool = False) -> dict[str, Any]:
    """Benchmark entry point (same as :func:`rows`)."""
    return rows(quick=quick)


if __name__ == "__main__":
    os.environ.setdefault("MUJOCO_GL", "egl")
    import sys

    print(json.dumps(rows(quick="--quick" in sys.argv), indent=2))
