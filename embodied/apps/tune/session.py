"""The tuning session: runs :func:`embodied.loop.rollout` in a background thread.

The loop streams one telemetry sample per control step through a rollout callback; the page's
commands are validated on arrival (:mod:`embodied.apps.tune.commands`) and queued, then applied by
the loop thread between control steps, so the controller is only ever touched by one thread.
Pausing blocks inside the step callback; reset/new seed/experiments end the running episode
through ``should_stop``.

What the loop does is the session's :class:`SessionState`: live episodes or an experiment (step
test, auto-tune), each running, paused, or paused with one control step granted. Every change
goes through :meth:`TuneSession._transition`, which allows only the changes listed in
:data:`TRANSITIONS`. Two one-shot requests sit beside the state, set and cleared only by the
session's methods: *stop* (end the running episode) and *cancel* (abort the experiment). Each
command has one handler method on the session (:attr:`TuneSession.HANDLERS`).
"""

from __future__ import annotations

import enum
import itertools
import logging
import math
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

import controllers
from embodied.apps.tune import experiments, gains_io
from embodied.apps.tune.commands import Command, ValidationContext, parse_command
from embodied.apps.tune.configuration_tune import TuneConfig
from embodied.apps.tune.live_controller import Builder, LiveController
from embodied.apps.tune.task import TuneTask
from embodied.contracts import Controller
from embodied.errors import ConfigError, EmbodiedError
from embodied.loop import Episode, Setpoint, Steering, StepRecord, rollout
from embodied.recording import LiveView, McapRecorder, SafetyTap

log = logging.getLogger(__name__)

TELEMETRY_KEEP = 20_000
"""Telemetry samples kept for late-joining pages."""
BUSY_ALLOWED = frozenset({"pause", "resume", "step", "stop_job", "list", "save"})
"""Commands accepted while an experiment (step test, auto-tune) runs."""


class SessionState(enum.Enum):
    """What the session's loop does.

    Live episodes and experiments (a step test or auto-tune, run as a job by the loop thread)
    can each run, be held between two control steps, or be held with one control step granted
    (the page's Step button). The page's ``paused`` and ``busy`` derive from the state.
    """

    RUNNING = "running"
    """Live episodes run, one after the other."""
    PAUSED = "paused"
    """The live episode is held between two control steps."""
    STEPPING = "stepping"
    """Paused with one control step granted; back to :attr:`PAUSED` once it is taken."""
    EXPERIMENT = "experiment"
    """An experiment runs; commands outside :data:`BUSY_ALLOWED` are refused."""
    EXPERIMENT_PAUSED = "experiment_paused"
    """The experiment's episode is held between two control steps."""
    EXPERIMENT_STEPPING = "experiment_stepping"
    """The experiment is paused with one control step granted."""

    @property
    def paused(self) -> bool:
        """Held between control steps (a granted step included), live or experiment."""
        return self not in (SessionState.RUNNING, SessionState.EXPERIMENT)

    @property
    def stepping(self) -> bool:
        """Held with one control step granted."""
        return self in (SessionState.STEPPING, SessionState.EXPERIMENT_STEPPING)

    @property
    def busy(self) -> bool:
        """An experiment runs (in any of its modes)."""
        return self in _LIVE_OF

    def resumed(self) -> SessionState:
        """This phase (live or experiment), running."""
        return SessionState.EXPERIMENT if self.busy else SessionState.RUNNING

    def held(self) -> SessionState:
        """This phase, paused."""
        return SessionState.EXPERIMENT_PAUSED if self.busy else SessionState.PAUSED

    def step_granted(self) -> SessionState:
        """This phase, paused with one control step granted."""
        return SessionState.EXPERIMENT_STEPPING if self.busy else SessionState.STEPPING


_EXPERIMENT_OF: Mapping[SessionState, SessionState] = MappingProxyType(
    {
        SessionState.RUNNING: SessionState.EXPERIMENT,
        SessionState.PAUSED: SessionState.EXPERIMENT_PAUSED,
        SessionState.STEPPING: SessionState.EXPERIMENT_STEPPING,
    }
)
"""Live state -> the experiment state it starts in: the experiment keeps the run mode, so a
Pause pressed while the experiment was being queued still holds it."""
_LIVE_OF: Mapping[SessionState, SessionState] = MappingProxyType(
    {exp: live for live, exp in _EXPERIMENT_OF.items()}
)
"""Experiment state -> the live state it ends in (the run mode carries over again)."""

_S = SessionState
TRANSITIONS: Mapping[SessionState, frozenset[SessionState]] = MappingProxyType(
    {
        # self-loops: Pause/Resume/Step are idempotent (pressing Pause twice is no error)
        _S.RUNNING: frozenset({_S.RUNNING, _S.PAUSED, _S.STEPPING, _S.EXPERIMENT}),
        _S.PAUSED: frozenset({_S.PAUSED, _S.RUNNING, _S.STEPPING, _S.EXPERIMENT_PAUSED}),
        _S.STEPPING: frozenset({_S.STEPPING, _S.PAUSED, _S.RUNNING, _S.EXPERIMENT_STEPPING}),
        _S.EXPERIMENT: frozenset(
            {_S.EXPERIMENT, _S.EXPERIMENT_PAUSED, _S.EXPERIMENT_STEPPING, _S.RUNNING}
        ),
        _S.EXPERIMENT_PAUSED: frozenset(
            {_S.EXPERIMENT_PAUSED, _S.EXPERIMENT, _S.EXPERIMENT_STEPPING, _S.PAUSED}
        ),
        _S.EXPERIMENT_STEPPING: frozenset(
            {_S.EXPERIMENT_STEPPING, _S.EXPERIMENT_PAUSED, _S.EXPERIMENT, _S.STEPPING}
        ),
    }
)
"""State -> the states it may change to.

Within a phase (live or experiment) Pause, Resume and Step move freely; a granted step taken
moves STEPPING to PAUSED. Live -> experiment happens only when the loop thread starts a job and
experiment -> live only when it ends, both keeping the run mode (:data:`_EXPERIMENT_OF`). A
failure pauses the live phase. Anything else (e.g. PAUSED -> EXPERIMENT, EXPERIMENT -> PAUSED)
is a bug in the session and raises :class:`TransitionError`.
"""
del _S


class TransitionError(RuntimeError):
    """A state change outside :data:`TRANSITIONS`: a bug in the session, never user input."""


def default_builder(ctype: str, params: dict[str, Any]) -> Controller:
    """Build a controller of ``ctype`` with ``controllers.make``.

    ``rl`` takes ``path``: a controller YAML (``controllers.load``) or a saved RL folder.

    Args:
        ctype: Controller type (``fixed``, ``pid``, ``rl``).
        params: Its parameters.

    Returns:
        The controller.

    Raises:
        ConfigError: the parameters are invalid or the RL path is not a saved controller.
    """
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

    Only the loop thread (or, without :meth:`start`, the caller of :meth:`submit`) changes the
    state; other threads read it and set the one-shot requests.

    Args:
        task: The task to run.
        config: Tuning configuration (initial setpoint, controller, seed, output folder).
        build: ``build(type, params) -> Controller``; defaults to ``controllers.make``.

    Raises:
        ConfigError: the configured setpoint is outside the task's range.
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
        self._safety_seen = 0  # safety-filter events already sent to the page
        self._seed_pinned = True  # the first live episode uses config.seed
        self.episode = 0
        self.status = "idle"
        self.proposal: dict[str, Any] | None = None
        self.last_step_result: dict[str, Any] | None = None
        self._state = SessionState.RUNNING
        self._stop_requested = False
        self._cancel_requested = False
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
        self._recording: McapRecorder | None = None  # config.record, opened at the first episode
        self._progress0: float | None = None
        self.state_version = 0

    # -- state ---------------------------------------------------------------------------
    @property
    def state(self) -> SessionState:
        """The current state."""
        return self._state

    @property
    def paused(self) -> bool:
        """Held between control steps (live or experiment)."""
        return self._state.paused

    @property
    def busy(self) -> bool:
        """An experiment runs."""
        return self._state.busy

    @property
    def stop_requested(self) -> bool:
        """The running episode was asked to end (reset, new seed, Stop, experiment, close)."""
        return self._stop_requested

    @property
    def cancel_requested(self) -> bool:
        """The person pressed Stop: the running (or queued) experiment should give up."""
        return self._cancel_requested

    def _transition(self, target: SessionState) -> None:
        """Change the state to ``target``; the one place the state changes.

        Raises:
            TransitionError: ``TRANSITIONS`` does not allow the change (a bug).
        """
        current = self._state
        if target not in TRANSITIONS[current]:
            raise TransitionError(f"tune session: no transition {current.name} -> {target.name}")
        self._state = target
        if (current.paused, current.busy) != (target.paused, target.busy):
            self.state_version += 1  # the page shows paused/busy: send it a new state

    def _begin_experiment(self) -> None:
        """Enter the experiment phase in the current run mode (the loop starts a job)."""
        if self._state.busy:  # a job inside a job: the loop runs one at a time
            raise TransitionError(f"tune session: experiment started in {self._state.name}")
        self._transition(_EXPERIMENT_OF[self._state])

    def _end_experiment(self) -> None:
        """Leave the experiment phase, keeping the run mode (the job returned or raised)."""
        if not self._state.busy:
            raise TransitionError(f"tune session: experiment ended in {self._state.name}")
        self._transition(_LIVE_OF[self._state])

    def _request_stop(self) -> None:
        """Ask the running episode to end at its next control step (taken by run_episode)."""
        self._stop_requested = True

    def _request_cancel(self) -> None:
        """Ask the experiment to give up (cleared when one is queued or has stopped)."""
        self._cancel_requested = True

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        """Start the loop thread (live episodes until :meth:`close`)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="embodied-tune-loop", daemon=True
            )
            self._thread.start()

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the loop thread and close the env.

        Args:
            timeout_s: How long to wait for the loop thread to finish its control step.
        """
        self._closed.set()
        self._request_stop()
        if self._thread is not None:
            self._thread.join(timeout_s)
        close = self.task.on_close or getattr(self.task.env, "close", None)
        if callable(close):
            close()
        if self._recording is not None:
            self._recording.close()

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

        Args:
            message: The decoded JSON command (``{"cmd": ..., ...}``).

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
            # at once, not when the loop drains it: auto-tune checks it between step tests,
            # some of which (repeated candidates) run no episode that would drain commands
            self._request_cancel()
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
        self.HANDLERS[cmd.name](self, dict(cmd.args))

    def _queue_job(self, job: Callable[[], object]) -> None:
        """Run ``job`` (an experiment) in the loop thread after ending the live episode.

        Args:
            job: Called without arguments by the loop thread, in an experiment state.
        """
        self._jobs.append(job)
        self._cancel_requested = False  # a Stop pressed before belongs to an earlier job
        self._request_stop()
        self._transition(self._state.resumed())  # the person asked for it: it starts running

    # -- command handlers (loop thread only) ---------------------------------------------
    def _cmd_setpoint(self, args: dict[str, Any]) -> None:
        self.setpoint = args["value"]

    def _cmd_gains(self, args: dict[str, Any]) -> None:
        self.live.set_params(args["type"], args["params"])

    def _cmd_controller(self, args: dict[str, Any]) -> None:
        self.live.set_mode(args["type"], {"path": args["path"]} if args["type"] == "rl" else None)

    def _cmd_pause(self, args: dict[str, Any]) -> None:
        self._transition(self._state.held())

    def _cmd_resume(self, args: dict[str, Any]) -> None:
        self._transition(self._state.resumed())

    def _cmd_step(self, args: dict[str, Any]) -> None:
        self._transition(self._state.step_granted())

    def _cmd_reset(self, args: dict[str, Any]) -> None:
        self._request_stop()

    def _cmd_new_seed(self, args: dict[str, Any]) -> None:
        self.seed = args["seed"] if args["seed"] is not None else random.randrange(2**31 - 1)
        self._seed_pinned = True  # the next live episode uses it, whatever the seed mode
        self._request_stop()

    def _cmd_step_test(self, args: dict[str, Any]) -> None:
        self._queue_job(lambda: experiments.step_test(self, args["from"], args["to"]))

    def _cmd_autotune(self, args: dict[str, Any]) -> None:
        self._queue_job(
            lambda: experiments.autotune(self, args["from"], args["to"], args["budget"])
        )

    def _cmd_apply_proposal(self, args: dict[str, Any]) -> None:
        if self.proposal is None:
            raise ConfigError("no auto-tune proposal yet", fix="run Auto-tune first")
        self.live.set_params("pid", self.proposal)
        self.emit("info", message="applied proposal " + format_value(self.proposal))

    def _cmd_stop_job(self, args: dict[str, Any]) -> None:
        # the cancel request was set by submit(); ending the episode stops the running step test
        self._request_stop()

    def _cmd_save(self, args: dict[str, Any]) -> None:
        path = gains_io.save(self, args["name"])
        self.emit("saved", message=f"saved {path.name}", files=gains_io.list_files(self))

    def _cmd_load(self, args: dict[str, Any]) -> None:
        gains_io.load(self, args["name"])
        params = self.live.params.get(self.live.mode, {})
        self.emit(
            "loaded", message=f"loaded {args['name']}: {self.live.mode} {format_value(params)}"
        )

    def _cmd_list(self, args: dict[str, Any]) -> None:
        self.emit("files", files=gains_io.list_files(self))

    HANDLERS: ClassVar[Mapping[str, Callable[[TuneSession, dict[str, Any]], None]]] = (
        MappingProxyType(
            {
                "setpoint": _cmd_setpoint,
                "gains": _cmd_gains,
                "controller": _cmd_controller,
                "pause": _cmd_pause,
                "resume": _cmd_resume,
                "step": _cmd_step,
                "reset": _cmd_reset,
                "new_seed": _cmd_new_seed,
                "step_test": _cmd_step_test,
                "autotune": _cmd_autotune,
                "apply_proposal": _cmd_apply_proposal,
                "stop_job": _cmd_stop_job,
                "save": _cmd_save,
                "load": _cmd_load,
                "list": _cmd_list,
            }
        )
    )
    """Command name (:data:`embodied.apps.tune.commands.COMMANDS`) -> handler(session, args)."""

    # -- events and telemetry ------------------------------------------------------------
    def emit(self, kind: str, **payload: Any) -> None:
        """Queue an event (``error``, ``info``, ``step_result``, ...) for the page.

        Args:
            kind: The event's ``type``.
            **payload: Its other fields (JSON values).
        """
        with self._lock:
            self._events.append((next(self._event_seq), {"type": kind, **payload}))

    def events_since(self, seq: int) -> tuple[int, list[dict[str, Any]]]:
        """Events newer than ``seq`` and the newest sequence number.

        Args:
            seq: The newest sequence number the caller has seen.
        """
        with self._lock:
            new = [e for s, e in self._events if s > seq]
            last = self._events[-1][0] if self._events else seq
        return last, new

    def telemetry_since(self, seq: int, limit: int = 2000) -> list[dict[str, Any]]:
        """Telemetry samples with sequence number greater than ``seq`` (oldest first).

        Args:
            seq: The newest sample sequence number the caller has seen (-1: all kept).
            limit: At most this many (the newest) samples.
        """
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
            "seed_mode": self.config.seed_mode,
            "hold": self.config.hold,
            "step_from": self.config.step_from,
            "step_to": self.config.step_to,
            "settle_band": self.config.settle_band,
            "max_overshoot_pct": self.config.max_overshoot_pct,
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
        return self._stop_requested or self._closed.is_set()

    def _safety_events(self) -> int | None:
        """Send the page each new event of the robot's safety filter (clip, refusal, e-stop);
        returns the filter's event count (None without a filter that records events)."""
        events = getattr(self.task.safety, "events", None)
        if events is None:
            return None
        counts = getattr(self.task.safety, "counts", None)
        total = int(sum(counts.values())) if counts is not None else len(events)
        new = total - self._safety_seen
        if new > 0:
            fresh = list(events)[-min(new, len(events), 5) :]  # at most 5 per step to the page
            for event in fresh:
                self.emit(
                    "safety",
                    message=f"safety {event.rule} at step {event.step}: {event.message}",
                    event=event.to_dict(),
                    total=total,
                )
        self._safety_seen = total
        return total

    def _on_step(self, rec: StepRecord) -> None:
        observe = getattr(self._setpoint_override, "observe", None)
        if observe is not None:  # a settled-start step waits on the measurement
            observe(rec.t * self.task.env.dt, float(rec.measurement))
        safety_total = self._safety_events()
        info = rec.info
        progress = self._progress(info, rec.t)
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
            "safety_events": safety_total,
            "estopped": bool(getattr(self.task.safety, "estopped", False)),
        }
        frame = rec.obs.get(self.task.camera) if self.task.camera else None
        with self._lock:
            sample["seq"] = next(self._seq)
            self._telemetry.append(sample)
            if frame is not None:
                self._frame, self._frame_seq = frame, self._frame_seq + 1
        self._drain()
        while self._state.paused and not self._should_stop():
            if self._state.stepping:  # let this one control step through, then hold again
                self._transition(self._state.held())
                break
            time.sleep(0.02)
            self._drain()

    def run_episode(
        self,
        *,
        setpoint: Setpoint | None = None,
        pace: bool | None = None,
        label: str = "episode",
        stop_on_success: bool | None = None,
        seed: int | None = None,
    ) -> Episode:
        """Run one episode with the live controller, streaming telemetry.

        Args:
            setpoint: A setpoint schedule overriding the live setpoint (experiments).
            pace: Hold the control rate in wall time (default: ``config.pace``; always on
                for realtime tasks such as robots).
            label: Status shown on the page while it runs.
            stop_on_success: End the episode when the task succeeds (default: not in the
                hold mode, ``config.hold``).
            seed: Reset seed (default: the live episode seed :attr:`seed`).

        Returns:
            The recorded episode (``meta["reason"]`` is ``"stopped"`` when it was ended early).
        """
        self._stop_requested = False  # the request ended the previous episode, not this one
        self.episode += 1
        self.status = label
        self._progress0 = None
        self._setpoint_override = setpoint
        self.state_version += 1
        episode_seed = self.seed if seed is None else int(seed)
        callbacks: list[Callable[[StepRecord], None]] = [self._on_step]
        recording = self._recording
        tap = None
        if self.config.record is not None or self.config.foxglove is not None:
            if recording is None:
                live = None if self.config.foxglove is None else LiveView(self.config.foxglove)
                if live is not None:
                    self.emit("info", message=f"live view for Foxglove on {live.url}")
                recording = self._recording = McapRecorder(
                    self.config.record, self.task.env.describe(), live=live
                )
            recording.start_episode(seed=episode_seed, meta={"label": label})
            callbacks.append(recording)
            if self.task.safety is not None and hasattr(self.task.safety, "counts"):
                tap = SafetyTap(self.task.safety, recording)
                callbacks.append(tap)
        ended = False
        try:
            ep = rollout(
                self.task.env,
                self.task.policy,
                steering=self.steering,
                seed=episode_seed,
                safety=self.task.safety,
                pace=True if self.task.realtime else (self.config.pace if pace is None else pace),
                record_images=self.task.camera is not None,
                stop_on_success=not self.config.hold
                if stop_on_success is None
                else stop_on_success,
                callbacks=callbacks,
                should_stop=self._should_stop,
            )
            if recording is not None:
                recording.end_episode(success=ep.success, reason=str(ep.meta.get("reason")))
                ended = True
            return ep
        finally:
            if recording is not None and not ended:
                if tap is not None:
                    tap()  # the event that ended it (a fault)
                recording.end_episode(reason="error")
            self._setpoint_override = None
            self.status = "idle"
            self.state_version += 1

    def _run(self) -> None:
        while not self._closed.is_set():
            self._drain()
            job = self._jobs.popleft() if self._jobs else None
            try:
                if job is not None:
                    self._begin_experiment()
                    try:
                        job()
                    finally:
                        self._end_experiment()
                        self.state_version += 1
                else:
                    self._live_episode()
            except EmbodiedError as exc:
                if job is not None and self._cancel_requested:  # the person pressed Stop
                    self.emit("stopped", message=f"experiment stopped ({exc})")
                    self._cancel_requested = False
                else:
                    self.emit("error", message=str(exc))
                    self._transition(self._state.held())
            except Exception as exc:  # keep serving; the page shows what broke
                log.exception("tuning loop failed")
                self.emit("error", message=f"loop failed: {type(exc).__name__}: {exc}")
                self._transition(self._state.held())
                time.sleep(0.5)

    def _live_episode(self) -> None:
        while self._state.paused and not self._closed.is_set() and not self._jobs:
            # Step or Reset while paused start the next episode (it holds after one step)
            if self._state.stepping or self._stop_requested:
                break
            time.sleep(0.02)
            self._drain()
        if not self._seed_pinned:  # a seed per episode (config.seed_mode)
            if self.config.seed_mode == "sequence":
                self.seed += 1
            elif self.config.seed_mode == "random":
                self.seed = random.randrange(2**31 - 1)
        self._seed_pinned = False
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

    def _progress(self, info: Mapping[str, Any], t: int) -> float:
        """Task progress in [0, 1]: ``info["progress"]``, else distance covered, else time."""
        if "progress" in info:
            return float(info["progress"])
        for key in ("target_dist", "distance", "dist_to_target", "goal_distance"):
            if key in info:
                d = float(info[key])
                if self._progress0 is None:  # the first distance of the episode is 0 progress
                    self._progress0 = max(d, 1e-9)
                return float(np.clip(1.0 - d / self._progress0, 0.0, 1.0))
        return (t + 1) / max(self.task.env.max_episode_steps, 1)


def _finite(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def format_value(v: Any) -> str:
    """Short text of a value for event messages (floats to 4 significant digits).

    Args:
        v: A float, a mapping of values, or anything printable.
    """
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{k}={format_value(x)}" for k, x in v.items()) + "}"
    return str(v)
