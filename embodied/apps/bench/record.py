"""``embodied bench record``: what ``--record FILE.mcap`` costs the control loop, and import speed.

* Overhead: the two-camera camera arm task (``mujoco:arm_reach``, ``front,top`` at 128 px, the
  scripted expert) rolled out with and without an :class:`~embodied.recording.McapRecorder`
  callback, episodes interleaved on the same seeds; per control step, the recorder's own time
  (what it adds to the loop) against the 20 Hz period (target: <= 5 %), and the whole step's
  time with and without it.
* File size per minute of such a session (20 Hz, two JPEG cameras).
* Import: ``embodied datasets import`` of that file (decode, align, JPEG decode, write) in
  frames per second, against ``rosbags``' raw read of the same file (messages without
  deserialising) in the same run.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np


class _Timed:
    """Wraps the recorder callback, timing each call (s)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.times = inner, []  # type: ignore[var-annotated]

    def __call__(self, record: Any) -> None:
        t0 = time.perf_counter()
        self.inner(record)
        self.times.append(time.perf_counter() - t0)


def run(quick: bool = False) -> dict[str, Any]:
    """Recording overhead (ms per step, % of the 20 Hz period), size per minute, import speed."""
    import policies
    import sim
    from embodied.datasets.bags import import_bag
    from embodied.loop import rollout
    from embodied.recording import McapRecorder

    episodes = 2 if quick else 6
    env = sim.make("mujoco:arm_reach", camera=["front", "top"], image_size=128)
    policy = policies.load("expert", env=env)
    period_s = 1.0 / env.control_rate_hz
    with tempfile.TemporaryDirectory(prefix="bench-record-") as tmp:
        path = Path(tmp) / "session.mcap"
        recorder = McapRecorder(path, env.describe())
        timed = _Timed(recorder)
        step_with: list[float] = []
        step_without: list[float] = []
        steps = 0
        for k in range(episodes):
            for with_recording in (k % 2 == 0, k % 2 != 0):  # alternate which goes first
                if with_recording:
                    recorder.start_episode(seed=k)
                ep = rollout(env, policy, seed=k, callbacks=[timed] if with_recording else [])
                if with_recording:
                    recorder.end_episode(success=ep.success)
                    steps += len(ep)
                # the loop's own step time, excluding the callbacks
                totals = list(ep.timings_ms["total"])
                (step_with if with_recording else step_without).extend(totals)
        recorder.close()
        size = path.stat().st_size
        per_step = np.array(timed.times) * 1e3
        t0 = time.perf_counter()
        result = import_bag(path, Path(tmp) / "data")
        import_s = time.perf_counter() - t0
        from rosbags.highlevel import AnyReader

        t0 = time.perf_counter()
        raw = 0
        with AnyReader([path]) as reader:
            for _conn, _t, _data in reader.messages():
                raw += 1
        raw_s = time.perf_counter() - t0
    minutes = steps * period_s / 60.0
    frames = 2 * result.steps  # two cameras
    return {
        "task": "mujoco:arm_reach, cameras front+top 128 px, 20 Hz, scripted expert",
        "steps_recorded": steps,
        "record_ms_per_step_p50": float(np.median(per_step)),
        "record_ms_per_step_p99": float(np.percentile(per_step, 99)),
        "record_ms_per_step_mean": float(per_step.mean()),
        "overhead_pct_of_period": float(100 * per_step.mean() / (period_s * 1e3)),
        "loop_step_ms_p50_without": statistics.median(step_without),
        "loop_step_ms_p50_with": statistics.median(step_with),
        "file_mb_per_minute": size / 1e6 / minutes if minutes else float("nan"),
        "import_frames_per_s": frames / import_s,
        "import_steps_per_s": result.steps / import_s,
        "rosbags_raw_messages_per_s": raw / raw_s,
        "import_s": import_s,
        "rosbags_raw_read_s": raw_s,
        "import_vs_raw_read_time_ratio": import_s / raw_s,
    }
