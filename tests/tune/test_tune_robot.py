"""Tuning on a robot: the session drives RobotEnv (simulated robot, same code as ROS) through
its safety filter at the control rate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from embodied.apps.tune import TuneConfig, TuneSession
from embodied.apps.tune.task import build_robot_task
from embodied.contracts import Env, Knob, KnobMixin
from hardware import DEFAULT_CONFIG
from policies.bringup import SinePolicy


class SteerableSine(KnobMixin, SinePolicy):
    """Bring-up sine whose frequency is scaled by ``3 ** alpha``: alpha sets joint speed."""

    def __init__(self, env: Env) -> None:
        super().__init__(env, amplitude_rad=0.15, frequency_hz=0.4)
        self._knobs = {"alpha": Knob.scalar("alpha", -1.0, 1.0, 0.0)}
        self._phase = 0.0

    def reset(self) -> None:
        super().reset()
        self.reset_knobs()
        self._phase = 0.0

    def predict_action_chunk(self, obs: dict[str, Any]) -> np.ndarray:
        if self._center is None:
            self._center = np.asarray(obs["state"], dtype=np.float64)[: self.action_dim].copy()
        self._phase += (
            2 * np.pi * self.frequency_hz * 3.0 ** float(self.get_knob("alpha")[0]) * self.dt
        )
        offsets = np.arange(self.action_dim) * np.pi / 2
        wave = np.sin(self._phase + offsets) - np.sin(offsets)
        return (self._center + self.amplitude_rad * wave)[None, :]


def test_session_tunes_on_the_dry_run_robot_with_its_safety_filter(tmp_path: Path) -> None:
    cfg = TuneConfig(out_dir=tmp_path, setpoint=0.05, controller="fixed")
    task = build_robot_task(
        cfg, str(DEFAULT_CONFIG), dry_run=True, max_seconds=1.0, policy_factory=SteerableSine
    )
    assert task.realtime and task.safety is not None and task.env.env_id.startswith("robot:")
    session = TuneSession(task, cfg)
    try:
        slow = session.run_episode(pace=False)  # realtime: paced anyway
        session.submit({"cmd": "gains", "type": "fixed", "params": {"value": 1.0}})
        fast = session.run_episode()
        assert len(slow) == len(fast) == 20  # 1 s at 20 Hz
        assert np.all(fast.knobs["alpha"] == 1.0) and np.all(slow.knobs["alpha"] == 0.0)
        assert np.isfinite(fast.measurements[1:]).all()  # ee speed (m/s) from the robot's FK
        # the robot's safety filter sits in the loop: it clipped the too-fast targets
        assert np.any(np.abs(fast.raw_actions - fast.actions) > 1e-6)
        samples = session.telemetry_since(-1)
        assert len(samples) == 40
        # ... and the page is told: each clip as a "safety" event, the count in the telemetry
        events = [e for e in session.events_since(-1)[1] if e["type"] == "safety"]
        assert events and all(e["event"]["rule"] for e in events)
        assert events[-1]["total"] == int(sum(task.safety.counts.values()))  # type: ignore[union-attr]
        assert samples[-1]["safety_events"] == events[-1]["total"] and not samples[-1]["estopped"]
    finally:
        session.close()
    assert not task.env.robot.connected  # type: ignore[attr-defined]
