"""The tuning session: runs :func:`embodied.loop.rollout` in a background thread.

The loop streams one telemetry sample per control step through a rollout callback; the page's
commands are validated on arrival (:mod:`embodied.apps.tune.commands`) and queued, then applied by
the loop thread between control steps, so the controller is only ever touched by one thread.
Pausing blocks inside the step callback; reset/new seed/experiments end the running episode
through ``should_stop``.
"""

from __future__ import annotations

import itertools
import logging
import math
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from embodied.apps.tune.commands import Command, ValidationContext, parse_command
from embodied.apps.tune.configuration_tune import TuneConfig
from embodied.apps.tune.live_controller import Builder, LiveController
from embodied.contracts import ActionFilter, Concept, Controller, Env, Policy
from embodied.errors import ConfigError, EmbodiedError
from embodied.loop import Episode, Setpoint, Steering, StepRecord, rollout

log = logging.getLogger(__name__)

TELEMETRY_KEEP = 20_000
"""Telemetry samples kept for late-joining pages."""
BUSY_ALLOWED = frozenset({"pause", "resume", "step", "stop_job", "list", "save"})
"""Commands accepted while an experiment (step test, auto-tune) runs."""


@dataclass
class TuneTask:
    """What is tuned: an env, a Steerable policy, the concept measured and the knob driven.

    Args:
        env: The env (sim or robot).
        policy: A Steerable policy with knob ``knob``.
        concept: The measured concept signal.
        knob: Knob name (scalar knobs, or vector knobs with ``to_knob``).
        setpoint_range: Allowed setpoints (concept units).
        params: Default parameters per controller type (``pid``, ``fixed``).
        to_knob: Maps the scalar controller output onto the knob value (None: identity).
        camera: Observation key of the camera shown on the page (None: first camera).
        safety: Action filter between policy and env (a robot's :class:`SafetyFilter`).
        realtime: Every episode, experiments included, runs at the control rate (robots).
        on_close: Called by :meth:`TuneSession.close` (e.g. disconnect a robot); default
            ``env.close()``.
    """

    env: Env
    policy: Policy
    concept: Concept
    knob: str
    setpoint_range: tuple[float, float]
    params: dict[str, dict[str, Any]] = field(default_factory=dict)
    to_knob: Callable[[float], float | np.ndarray] | None = None
    camera: str | None = None
    safety: ActionFilter | None = None
    realtime: bool = False
    on_close: Callable[[], None] | None = None

    def __post_init__(self) -> None:
        knobs = self.policy.knobs()  # type: ignore[attr-defined]
        if self.knob not in knobs:
            raise ConfigError(
                f"policy {type(self.policy).__name__} has no knob {self.knob!r}; knobs: {sorted(knobs)}",
                fix="pass --knob with one of the listed knobs",
            )
        lo, hi = self.setpoint_range
        if not lo < hi:
            raise ConfigError(f"setpoint range {self.setpoint_range} is empty")
        if self.camera is None:
            cams = sorted(self.env.observation_spec.cameras)
            self.camera = f"image.{cams[0]}" if cams else None

    @property
    def knob_range(self) -> tuple[float, float]:
        """Bounds of the (first element of the) knob."""
        k = self.policy.knobs()[self.knob]  # type: ignore[attr-defined]
        return float(k.low[0]), float(k.high[0])

    @property
    def neutral(self) -> float:
        """The knob default: the value held with the controller ``off``."""
        return float(self.policy.knobs()[self.knob].default[0])  # type: ignore[attr-defined]


def default_builder(ctype: str, params: dict[str, Any]) -> Controller:
    """Build a controller of ``ctype`` with ``controllers.make``.

    ``rl`` takes ``path``: a controller YAML (``controllers.load``) or a saved RL folder.
    """
    import controllers

    if ctype == "rl":
        path = Path(str(params.get("path", "")))
        if path.suffix in (".yaml", ".yml"):
            return controllers.load(path)  # a YAML written by Save gains / controllers.save
        if not path.is_dir():
            raise ConfigError(
                f"RL controller {str(path)!r} is neither a controller YAML nor a saved folder",
                fix="enter the path of a saved RL controller (.yaml or its folder)",
            )
        return controllers.make("rl", path=str(path))
    return controllers.make(ctype, **params)


class TuneSession:
    """A live, steerable rollout that a UI (or a script) can watch and change.

    Args:
        task: The task to run.
        config: Tuning configuration (initial setpoint, controller, seed, output folder).
        build: ``build(type, params) -> Controller``; defaults to ``controllers.make``.
    """

    def __init__(
        self, task: TuneTask, config: TuneConfig, build: Builder = default_builder
    ) -> None:
        self.task = task
        self.config = config
        self._build = build
        lo, hi = task.setpoint_range
        if not lo <= config.setpoint <= hi:
            raise ConfigError(
                f"setpoint {config.setpoint} outside the task's range [{lo}, {hi}]",
                fix=f"pass --setpoint in [{lo}, {hi}]",
            )
        self.live = LiveController(
            build,
            task.params,
            task.neutral,
            config.controller,
            clamp=task.knob_range if task.to_knob is None else None,
        )
        self.setpoint = float(config.setpoint)
        self._setpoint_override: Setpoint | None = None
        self.steering = Steering(
            task.concept,
            self.live,
            knob=task.knob,
            setpoint=self._setpoint_at,
            to_knob=task.to_knob,
        )
        self.seed = int(config.seed)
        self.episode = 0
        self.status = "idle"
        self.paused = False
        self.busy = False
        self.proposal: dict[str, Any] | None = None
        self.last_step_result: dict[str, Any] | None = None
        self._step_once = False
        self._stop_episode = False
        self._cancel_job = False
        self._closed = threading.Event()
        self._commands: queue.SimpleQueue[Command] = queue.SimpleQueue()
        self._jobs: deque[Callable[[], object]] = deque()
        self._lock = threading.Lock()
        self._seq = itertools.count()
        self._telemetry: deque[dict[str, Any]] = deque(maxlen=TELEMETRY_KEEP)
        self._events: deque[tuple[int, dict[str, Any]]] = deque(maxlen=500)
        self._event_seq = itertools.count(1)
        self._frame: np.ndarray | None = None
        self._frame_seq = 0
        self._thread: threading.Thread | None = None
        self._progress0: float | None = None
        self.state_version = 0

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        """Start the loop thread (live episodes until :meth:`close`)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="embodied-tune-loop", daemon=True
            )
            self._thread.start()

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the loop thread and close the env."""
        self._closed.set()
        self._stop_episode = True
        if self._thread is not None:
            self._thread.join(timeout_s)
        close = self.task.on_close or getattr(self.task.env, "close", None)
        if callable(close):
            close()

    # -- commands ------------------------------------------------------------------------
    def context(self) -> ValidationContext:
        """Current limits and parameters for command validation."""
        return ValidationContext(
            setpoint_range=self.task.setpoint_range,
            knob_range=self.task.knob_range,
            params=self.live.params_snapshot(),
            build=self._build,
            out_dir=self.config.out_dir,
        )

    def submit(self, message: Any) -> str:
        """Validate ``message`` and queue it for the loop thread.

        Returns:
            A short acknowledgement for the page.

        Raises:
            ConfigError: the command is malformed, out of range, or not allowed right now.
        """
        cmd = parse_command(message, self.context())
        if self.busy and cmd.name not in BUSY_ALLOWED:
            raise ConfigError(
                f"command {cmd.name!r} refused: an experiment ({self.status}) is running",
                fix="wait for it to finish or press Stop (auto-tune panel)",
            )
        if cmd.name == "stop_job":
            self._cancel_job = True
        self._commands.put(cmd)
        if self._thread is None:  # synchronous use (scripts, CLI): apply now
            self._drain()
        return (
            f"{cmd.name}: " + ", ".join(f"{k}={format_value(v)}" for k, v in cmd.args.items())
            if cmd.args
            else cmd.name
        )

    def _drain(self) -> None:
        while True:
            try:
                cmd = self._commands.get_nowait()
            except queue.Empty:
                return
            try:
                self._apply(cmd)
            except EmbodiedError as exc:
                self.emit("error", message=str(exc))
            except Exception as exc:  # a failing command must not kill the loop
                log.exception("command %s failed", cmd.name)
                self.emit("error", message=f"{cmd.name} failed: {type(exc).__name__}: {exc}")
            self.state_version += 1

    def _apply(self, cmd: Command) -> None:
        from embodied.apps.tune.handlers import HANDLERS

        HANDLERS[cmd.name](self, dict(cmd.args))

    def queue_job(self, job: Callable[[], object]) -> None:
        """Run ``job`` (an experiment) in the loop thread after ending the live episode."""
        self._jobs.append(job)
        self._cancel_job = False
        self._stop_episode = True
        self.paused = False

    # -- events and telemetry ------------------------------------------------------------
    def emit(self, kind: str, **payload: Any) -> None:
        """Queue an event (``error``, ``info``, ``step_result``, ...) for the page."""
        with self._lock:
            self._events.append((next(self._event_seq), {"type": kind, **payload}))

    def events_since(self, seq: int) -> tuple[int, list[dict[str, Any]]]:
        """Events newer than ``seq`` and the newest sequence number."""
        with self._lock:
            new = [e for s, e in self._events if s > seq]
            last = self._events[-1][0] if self._events else seq
        return last, new

    def telemetry_since(self, seq: int, limit: int = 2000) -> list[dict[str, Any]]:
        """Telemetry samples with sequence number greater than ``seq`` (oldest first)."""
        with self._lock:
            if not self._telemetry:
                return []
            first = self._telemetry[0]["seq"]
            start = max(0, seq + 1 - first)
            out = list(itertools.islice(self._telemetry, start, None))
        return out[-limit:]

    def latest_frame(self) -> tuple[int, np.ndarray | None]:
        """The newest camera frame (uint8 HxWx3) and its sequence number."""
        with self._lock:
            return self._frame_seq, self._frame

    def snapshot(self) -> dict[str, Any]:
        """The session state shown by the page's controls."""
        return {
            "env_id": self.task.env.env_id,
            "instruction": self.task.env.instruction,
            "concept": self.task.concept.name,
            "units": self.task.concept.units,
            "knob": self.task.knob,
            "knob_range": list(self.task.knob_range),
            "setpoint_range": list(self.task.setpoint_range),
            "control_rate_hz": self.task.env.control_rate_hz,
            "setpoint": self.setpoint,
            "mode": self.live.mode,
            "params": self.live.params_snapshot(),
            "seed": self.seed,
            "episode": self.episode,
            "status": self.status,
            "paused": self.paused,
            "busy": self.busy,
            "proposal": self.proposal,
        }

    # -- the loop ------------------------------------------------------------------------
    def _setpoint_at(self, t_s: float) -> float:
        sp = self._setpoint_override
        if sp is None:
            return self.setpoint
        return float(sp(t_s)) if callable(sp) else float(sp)

    def _should_stop(self) -> bool:
        return self._stop_episode or self._closed.is_set()

    def _on_step(self, rec: StepRecord) -> None:
        info = rec.info
        progress = _progress(info, rec.t, self.task.env.max_episode_steps, self)
        knob = np.asarray(rec.knobs.get(self.task.knob, [math.nan]), dtype=np.float64)
        sample = {
            "episode": self.episode,
            "t": round(rec.t * self.task.env.dt, 4),
            "measurement": _finite(rec.measurement),
            "setpoint": _finite(rec.setpoint),
            "output": _finite(self.live.last_output),
            "knob": _finite(float(knob[0])) if knob.size else None,
            "action_norm": _finite(float(np.linalg.norm(rec.action))),
            "progress": _finite(progress),
            "success": bool(rec.success),
            "mode": self.live.mode,
            "ctrl": self.live.state(),
        }
        frame = rec.obs.get(self.task.camera) if self.task.camera else None
        with self._lock:
            sample["seq"] = next(self._seq)
            self._telemetry.append(sample)
            if frame is not None:
                self._frame, self._frame_seq = frame, self._frame_seq + 1
        self._drain()
        while self.paused and not self._should_stop():
            if self._step_once:
                self._step_once = False
                break
            time.sleep(0.02)
            self._drain()

    def run_episode(
        self,
        *,
        setpoint: Setpoint | None = None,
        pace: bool | None = None,
        label: str = "episode",
        stop_on_success: bool = True,
    ) -> Episode:
        """Run one episode with the live controller, streaming telemetry.

        Args:
            setpoint: A setpoint schedule overriding the live setpoint (experiments).
            pace: Hold the control rate in wall time (default: ``config.pace``; always on
                for realtime tasks such as robots).
            label: Status shown on the page while it runs.
            stop_on_success: End the episode when the task succeeds.
        """
        self._stop_episode = False
        self.episode += 1
        self.status = label
        self._progress0 = None
        self._setpoint_override = setpoint
        self.state_version += 1
        try:
            return rollout(
                self.task.env,
                self.task.policy,
                steering=self.steering,
                seed=self.seed,
                safety=self.task.safety,
                pace=True if self.task.realtime else (self.config.pace if pace is None else pace),
                record_images=self.task.camera is not None,
                stop_on_success=stop_on_success,
                callbacks=[self._on_step],
                should_stop=self._should_stop,
            )
        finally:
            self._setpoint_override = None
            self.status = "idle"
            self.state_version += 1

    def _run(self) -> None:
        while not self._closed.is_set():
            self._drain()
            job = self._jobs.popleft() if self._jobs else None
            try:
                if job is not None:
                    self.busy = True
                    try:
                        job()
                    finally:
                        self.busy = False
                        self.state_version += 1
                else:
                    self._live_episode()
            except EmbodiedError as exc:
                if job is not None and self._cancel_job:  # the person pressed Stop
                    self.emit("stopped", message=f"experiment stopped ({exc})")
                    self._cancel_job = False
                else:
                    self.emit("error", message=str(exc))
                    self.paused = True
            except Exception as exc:  # keep serving; the page shows what broke
                log.exception("tuning loop failed")
                self.emit("error", message=f"loop failed: {type(exc).__name__}: {exc}")
                self.paused = True
                time.sleep(0.5)

    def _live_episode(self) -> None:
        while self.paused and not self._closed.is_set() and not self._jobs:
            if self._step_once or self._stop_episode:
                break
            time.sleep(0.02)
            self._drain()
        ep = self.run_episode(label="running")
        reason = ep.meta.get("reason")
        self.emit(
            "episode_end",
            message=f"episode {self.episode} ended ({reason}), success={ep.success}, steps={len(ep)}",
            success=ep.success,
            steps=len(ep),
            reason=reason,
        )
        if reason != "stopped":  # let the person see the end before the next episode
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline and not self._should_stop() and not self._jobs:
                time.sleep(0.02)
                self._drain()


def _finite(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def format_value(v: Any) -> str:
    """Short text of a value for event messages (floats to 4 significant digits)."""
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{k}={format_value(x)}" for k, x in v.items()) + "}"
    return str(v)


def _progress(info: Mapping[str, Any], t: int, horizon: int, session: TuneSession) -> float:
    """Task progress in [0, 1]: ``info["progress"]``, else distance covered, else time."""
    if "progress" in info:
        return float(info["progress"])
    for key in ("target_dist", "distance", "dist_to_target", "goal_distance"):
        if key in info:
            d = float(info[key])
            if session._progress0 is None:
                session._progress0 = max(d, 1e-9)
            return float(np.clip(1.0 - d / session._progress0, 0.0, 1.0))
    return (t + 1) / max(horizon, 1)
