"""Deploy a policy on a robot: ``embodied.loop.rollout`` + safety filter + episode logging.

:func:`deploy` is what ``embodied deploy`` runs. It connects the robot (a ROS robot, or the
simulated robot for a dry run), wraps it in :class:`~hardware.env.RobotEnv`, runs the one
closed loop with the :class:`~hardware.safety.SafetyFilter`, writes every episode with
:class:`embodied.datasets.DatasetWriter` (also the partial episode of a fault), and always
leaves the robot commanded to stop: on the time limit, on ``request_stop()`` (Ctrl-C), on a
fault and on any exception.

A saved robust shield (``DeployConfig.shield``, see :mod:`controllers.shield`) goes in front of
the safety filter: the shield snaps the policy's action to the nearest allowed discrete action
of its action set, then the safety filter still clips and limits that action.
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

import controllers
import policies
from controllers.shield import RobustShield, ShieldFilter
from controllers.shield.abstraction import Measure
from embodied.concepts import make_concept
from embodied.config import Rule, checked, validate
from embodied.contracts import ActionFilter, Policy
from embodied.datasets import DatasetWriter, EpisodeData
from embodied.errors import ActionError, ConfigError, EmbodiedError, SafetyFault
from embodied.io import write_json
from embodied.loop import Episode, Steering, StepRecord, rollout
from embodied.recording import LiveView, McapRecorder, SafetyTap, check_record_path
from embodied.specs import Observation
from hardware import make_robot
from hardware.configuration_robot import RobotConfig
from hardware.env import RobotEnv
from hardware.robot import Robot
from hardware.safety import SafetyFilter

log = logging.getLogger("embodied.apps.deploy")


@dataclass(frozen=True)
class DeployConfig:
    """A deployment run on a robot: the policy, its rate and time limit, the episodes.

    Args:
        policy: Policy name (hold, sine, expert, ...) or checkpoint folder.
        dry_run: Run the same loop against the simulated robot.
        rate_hz: Control rate in Hz (default: the robot config's).
        max_seconds: Time limit per episode (s).
        episodes: Episodes to run (the robot is not moved between them).
        controller: Controller YAML steering a policy knob (gains + meta).
        instruction: Task instruction.
        policy_kwargs: Extra keyword arguments of the policy factory (``--policy-arg``).
        clear_estop: Call the robot's enable service first (clears a latched robot e-stop).
        shield: Folder of a saved robust shield (RobustShield.save); it acts before the
            safety filter.
        shield_measure: module:function mapping an observation to the shield's measurement
            vector (default: the observation key the shield was saved with).
        record: MCAP file recording every control step: state, cameras, instruction, the
            action before and after the safety filter, knobs, measurement, setpoint, timings
            and safety events (:mod:`embodied.recording`; never overwritten).
        foxglove: Port of a live Foxglove view on 127.0.0.1 streaming the same channels
            (foxglove-sdk websocket server; 0 picks a free port; off when unset).
    """

    config_name: ClassVar[str] = "deploy"

    policy: str = checked(min_len=1, fix="e.g. --policy hold")
    dry_run: bool = False
    rate_hz: float | None = checked(
        None, gt=0, fix="e.g. --rate 20, or leave it out for the robot config's control_rate_hz"
    )
    max_seconds: float = checked(30.0, gt=0, fix="e.g. --max-seconds 30")
    episodes: int = checked(1, ge=1, fix="e.g. --episodes 1")
    controller: str | os.PathLike[str] | None = None
    instruction: str = ""
    policy_kwargs: Mapping[str, Any] = field(default_factory=dict)
    clear_estop: bool = False
    shield: str | os.PathLike[str] | None = None
    shield_measure: str | None = None
    record: str | os.PathLike[str] | None = None
    foxglove: int | None = checked(
        None, ge=0, le=65535, fix="e.g. --foxglove 8765 (Foxglove's default), or 0 for a free port"
    )

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "shield_measure",
            lambda c: c.shield_measure is None or c.shield is not None,
            "given without a shield",
            "add --shield <folder of a saved shield>, or drop --shield-measure",
        ),
        Rule(
            "shield_measure",
            lambda c: c.shield_measure is None or _is_import_path(c.shield_measure),
            "is not module:function",
            "e.g. --shield-measure embodied.apps.lab.shield:stopping_offsets",
        ),
    )

    def __post_init__(self) -> None:
        validate(self)
        object.__setattr__(self, "policy_kwargs", dict(self.policy_kwargs))
        if self.record is not None:
            check_record_path(self.record)


def _is_import_path(text: str) -> bool:
    module, sep, name = text.partition(":")
    return bool(sep and module and name.isidentifier())


def load_measure(path: str) -> Measure:
    """The function named by ``module:function`` (a shield's observation -> measurement map).

    Raises:
        ConfigError: the module does not import or has no such callable.
    """
    module_name, _, name = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"shield_measure {path!r}: module {module_name!r} does not import ({exc})",
            fix="give an importable module:function",
        ) from exc
    func = getattr(module, name, None)
    if not callable(func):
        raise ConfigError(
            f"shield_measure {path!r}: {module_name} has no function {name!r}",
            fix="give an importable module:function",
        )
    return func  # type: ignore[no-any-return]


class ShieldThenSafety:
    """:class:`~embodied.contracts.ActionFilter`: a :class:`ShieldFilter`, then the safety filter.

    The shield picks the allowed discrete action nearest to the policy's; the safety filter
    (limits, watchdogs, e-stop) has the last word on what is sent.

    Args:
        shield: The shield's filter (tracks the observations, counts its interventions).
        safety: The robot's safety filter.
    """

    def __init__(self, shield: ShieldFilter, safety: ActionFilter) -> None:
        self.shield = shield
        self.safety = safety
        self.interventions = 0
        self.steps = 0

    def reset(self) -> None:
        """Episode start: reset both (the intervention totals of the run are kept)."""
        self.interventions += self.shield.interventions
        self.steps += self.shield.steps
        self.shield.reset()
        self.safety.reset()

    def __call__(self, action: np.ndarray, obs: Observation) -> np.ndarray:
        """The shielded action, then safety-filtered."""
        return self.safety(self.shield(action, obs), obs)

    def summary(self) -> dict[str, int]:
        """Shield steps and replaced actions so far (all episodes)."""
        return {
            "steps": self.steps + self.shield.steps,
            "interventions": self.interventions + self.shield.interventions,
        }


def load_shield(config: DeployConfig, action_dim: int) -> ShieldFilter:
    """The :class:`ShieldFilter` of ``config.shield``, checked against the action size.

    Raises:
        CheckpointError: damaged shield files. ConfigError: a shield for another action size.
    """
    assert config.shield is not None
    measure = load_measure(config.shield_measure) if config.shield_measure else None
    shield = RobustShield.load(config.shield, measure=measure)
    if shield.actions.dim != action_dim:
        raise ConfigError(
            f"shield {str(config.shield)!r} acts on {shield.actions.dim}-dim actions, the robot "
            f"takes {action_dim}",
            fix="use a shield trained on this robot's action space",
        )
    return ShieldFilter(shield)


@dataclass
class DeployResult:
    """Outcome of :func:`deploy`.

    Attributes:
        reason: ``max_steps`` (time limit), ``stopped`` (stop requested), ``fault``, ``error``.
        steps: Control steps run, all episodes.
        episodes: Shard paths written.
        fault: The fault message, if any.
        summary: What ``summary.json`` holds.
    """

    reason: str
    steps: int
    episodes: list[Path]
    fault: str | None = None
    summary: dict[str, Any] = field(default_factory=dict)


class _Recorder:
    """Keeps the StepRecords of the running episode, so a fault still yields its data."""

    def __init__(self) -> None:
        self.records: list[StepRecord] = []

    def __call__(self, record: StepRecord) -> None:
        self.records.append(record)

    def episode_data(self, instruction: str, meta: Mapping[str, Any]) -> Any:
        rows = self.records
        keys = list(rows[0].obs) if rows else []
        obs = {k: np.stack([np.asarray(r.obs[k]) for r in rows]) for k in keys}
        n = len(rows)
        dones = np.zeros(n, dtype=np.uint8)
        if n:
            dones[-1] = 1
        return EpisodeData(
            obs=obs,
            actions=np.asarray([r.action for r in rows], dtype=np.float64),
            rewards=np.asarray([r.reward for r in rows], dtype=np.float64),
            dones=dones,
            attrs={
                "instruction": instruction,
                "success": False,
                "success_step": -1,
                "judge_score": -1.0,
                "meta": json.dumps(dict(meta), default=str),
            },
            extras={"raw_actions": np.asarray([r.raw_action for r in rows], dtype=np.float64)},
        )


def steering_from_file(path: str | os.PathLike[str]) -> Steering:
    """A :class:`Steering` from a controller YAML (``controllers.save`` format).

    The file's ``meta`` names the ``concept``, ``setpoint`` and ``knob`` (default ``alpha``).
    """
    meta = controllers.read_meta(path)
    missing = [k for k in ("concept", "setpoint") if k not in meta]
    if missing:
        raise ConfigError(
            f"controller file {str(path)!r} lacks meta {missing}",
            fix="add 'meta: {concept: ee_speed, setpoint: 0.1, knob: alpha}'",
        )
    setpoint = meta["setpoint"]
    if isinstance(setpoint, bool) or not isinstance(setpoint, int | float):
        raise ConfigError(
            f"controller file {str(path)!r}: meta setpoint {setpoint!r} is not a number",
            fix="set 'setpoint' to the concept's target in its units, e.g. 0.1",
        )
    if not math.isfinite(setpoint):  # the controller would chase it with every output
        raise ConfigError(
            f"controller file {str(path)!r}: meta setpoint {setpoint!r} is not finite",
            fix="set 'setpoint' to the concept's target in its units, e.g. 0.1",
        )
    try:
        concept = make_concept(str(meta["concept"]))
    except EmbodiedError as exc:  # an unknown concept name: say which file names it
        raise exc.in_file(path, "controller file") from exc
    return Steering(
        concept=concept,
        controller=controllers.load(path),
        knob=str(meta.get("knob", "alpha")),
        setpoint=float(setpoint),
    )


def deploy(
    robot_config: RobotConfig,
    config: DeployConfig,
    out: str | Path,
    *,
    stop_event: threading.Event | None = None,
    robot: Robot | None = None,
) -> DeployResult:
    """Run ``config.policy`` on ``robot_config``'s robot, safety-filtered; log to ``out``.

    Args:
        robot_config: Robot config (joints, limits, safety rules, ROS interface).
        config: The run: policy, dry run, rate, time limit, episodes, controller (a YAML
            steering a policy knob, see :func:`steering_from_file`), instruction.
        out: Output folder: ``episodes/`` (dataset shards), ``summary.json``,
            ``safety_events.json``.
        stop_event: Set it (e.g. from a SIGINT handler) to stop at the next control step.
        robot: A robot to use instead of building one from ``robot_config`` (tests).

    Returns:
        A :class:`DeployResult`. Faults do not raise: they end the run with
        ``reason="fault"`` after the stop command; other errors propagate after it.
    """
    rate = float(config.rate_hz or robot_config.control_rate_hz)
    policy, dry_run, max_seconds = config.policy, config.dry_run, config.max_seconds
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stop_event = stop_event or threading.Event()
    robot = robot or make_robot(robot_config, dry_run=dry_run)
    steering = steering_from_file(config.controller) if config.controller else None
    steps_per_episode = max(1, round(max_seconds * rate))
    run = _DeployRun(
        out,
        time.monotonic(),
        {
            "robot": robot_config.name,
            "dry_run": dry_run,
            "policy": str(policy),
            "rate_hz": rate,
            "max_seconds": max_seconds,
        },
    )
    try:
        with robot:
            if config.clear_estop:
                log.warning("clearing the robot e-stop (enable) on operator request")
                robot.enable()
            env = RobotEnv(
                robot,
                instruction=config.instruction,
                control_rate_hz=rate,
                max_episode_steps=steps_per_episode,
            )
            pol = policies.load(policy, env=env, **dict(config.policy_kwargs))
            # in `run` before the shield loads: a shield that fails to load still leaves the
            # safety summary and events in the run's files
            run.safety = safety = env.safety_filter()
            loop_filter: ActionFilter = safety
            if config.shield is not None:
                run.shielded = ShieldThenSafety(load_shield(config, env.action_spec.dim), safety)
                loop_filter = run.shielded
            writer = DatasetWriter(
                out / "episodes",
                env_args={
                    **env.describe(),
                    "robot_url": None if dry_run else robot_config.ros.url,
                    "dry_run": dry_run,
                    "policy": str(policy),
                },
            )
            run.recording = _open_recording(config, env)
            loop = _DeployLoop(
                robot,
                env,
                pol,
                safety,
                loop_filter,
                writer,
                steering,
                stop_event,
                steps_per_episode,
            )
            for index in range(config.episodes):
                _run_episode(run, loop, config, index)
                if run.reason != "max_steps":
                    break
            run.summary["link_losses"] = env.link_losses
            run.summary["steps_without_command"] = env.steps_without_command
    except BaseException as exc:
        run.reason = "stopped" if isinstance(exc, KeyboardInterrupt) else "error"
        run.fault = run.fault or f"{type(exc).__name__}: {exc}"
        raise
    finally:
        # `with robot` has commanded the stop (hold) and closed the link by now.
        _finish(run, robot)
    return DeployResult(run.reason, run.total_steps, run.shards, run.fault, run.summary)


@dataclass
class _DeployRun:
    """The state of one :func:`deploy` that its ``summary.json`` reports however far it got;
    each part is set as soon as it exists, so a failure after it still reports it."""

    out: Path
    """The output folder."""
    t0: float
    """Start (``time.monotonic()``, s)."""
    summary: dict[str, Any]
    """What ``summary.json`` holds so far."""
    shards: list[Path] = field(default_factory=list)
    reason: str = "max_steps"
    fault: str | None = None
    total_steps: int = 0
    safety: SafetyFilter | None = None
    shielded: ShieldThenSafety | None = None
    recording: McapRecorder | None = None


@dataclass(frozen=True)
class _DeployLoop:
    """What every episode of one :func:`deploy` runs with."""

    robot: Robot
    env: RobotEnv
    policy: Policy
    safety: SafetyFilter
    """The robot's safety filter (limits, watchdogs, e-stop)."""
    action_filter: ActionFilter
    """``safety``, behind the shield when there is one."""
    writer: DatasetWriter
    steering: Steering | None
    stop_event: threading.Event
    steps_per_episode: int


def _open_recording(config: DeployConfig, env: RobotEnv) -> McapRecorder | None:
    """The MCAP recording and live Foxglove view of ``config`` (None: neither asked for)."""
    if config.record is None and config.foxglove is None:
        return None
    live = None if config.foxglove is None else LiveView(config.foxglove)
    if live is not None:
        log.warning("live view for Foxglove on %s", live.url)
        print(f"foxglove: open connection {live.url}", flush=True)
    return McapRecorder(config.record, env.describe(), live=live)


def _run_episode(run: _DeployRun, loop: _DeployLoop, config: DeployConfig, index: int) -> None:
    """Run episode ``index`` until its time limit, a stop request or a fault; write it.

    A fault (:class:`SafetyFault`, :class:`ActionError`) commands the stop and keeps the
    partial episode; ``run.reason`` says how the episode ended (``max_steps`` goes on).

    Args:
        run: The run so far (episode shards, steps, reason and fault are added to it).
        loop: The robot, env, policy, filters and writer of every episode.
        config: The run's options (policy, time limit, instruction, dry run).
        index: The episode's number, from 0.
    """
    recorder = _Recorder()
    callbacks: list[Callable[[StepRecord], None]] = [recorder]
    tap = None
    recording = run.recording
    if recording is not None:
        recording.start_episode(meta={"episode": index, "policy": str(config.policy)})
        tap = SafetyTap(loop.safety, recording)
        callbacks += [recording, tap]
    deadline = time.monotonic() + config.max_seconds

    def should_stop() -> bool:
        return loop.stop_event.is_set() or time.monotonic() > deadline

    meta = {"episode": index, "dry_run": config.dry_run, "policy": str(config.policy)}
    try:
        episode: Episode = rollout(
            loop.env,
            loop.policy,
            steering=loop.steering,
            safety=loop.action_filter,
            pace=True,
            stop_on_success=False,
            callbacks=callbacks,
            should_stop=should_stop,
            max_steps=loop.steps_per_episode,
        )
        run.reason = episode.meta["reason"]
        if run.reason == "stopped" and not loop.stop_event.is_set():
            run.reason = "max_steps"  # the wall-clock deadline
        episode.meta.update(meta, deploy_reason=run.reason)
        run.shards.append(loop.writer.add(episode))
        run.total_steps += len(episode)
        run.summary["timing_ms_median"] = {
            k: float(np.median(v)) for k, v in episode.timings_ms.items() if len(v)
        }
    except (SafetyFault, ActionError) as exc:  # stop, keep the partial episode
        run.reason, run.fault = "fault", str(exc)
        log.error("fault: %s", exc)
        loop.robot.stop()
        if tap is not None:
            tap()  # the event that raised
        data = recorder.episode_data(
            config.instruction, {**meta, "deploy_reason": run.reason, "fault": run.fault}
        )
        if len(data):
            run.shards.append(loop.writer.add(data))
        run.total_steps += len(recorder.records)
    if recording is not None:
        recording.end_episode(reason=run.reason)


def _finish(run: _DeployRun, robot: Robot) -> None:
    """Close the recording and write ``summary.json`` and ``safety_events.json``.

    Runs however the run ended (after the robot's stop command), so it reads only what
    ``run`` got to.

    Args:
        run: The run, however far it got.
        robot: The robot (its command counts, last command and link statistics).
    """
    if run.recording is not None:
        run.recording.close()
    safety = run.safety
    run.summary.update(
        {
            "reason": run.reason,
            "fault": run.fault,
            "steps": run.total_steps,
            "duration_s": time.monotonic() - run.t0,
            "episodes": [str(p) for p in run.shards],
            "commands_sent": robot.commands_sent,
            "commands_refused": robot.commands_refused,
            "stop_command_rad": None if robot.last_sent is None else robot.last_sent.tolist(),
            "safety": None if safety is None else safety.summary(),
        }
    )
    if run.shielded is not None:
        run.summary["shield"] = run.shielded.summary()
    link = getattr(robot, "link", None) or getattr(robot, "last_link", None)
    if link is not None:
        run.summary["link"] = {k: v for k, v in vars(link.stats).items()}
    write_json(run.out / "summary.json", run.summary)
    if safety is not None:
        write_json(run.out / "safety_events.json", [e.to_dict() for e in safety.events])
