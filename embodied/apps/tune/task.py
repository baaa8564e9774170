"""The task ``embodied tune`` runs (:class:`TuneTask`: env + Steerable policy + concept + knob)
and its builders for the built-in sim task and for robots."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

import policies
import sim
from embodied.apps.tune.configuration_tune import TuneConfig
from embodied.concepts import make_concept
from embodied.config import Rule, validate
from embodied.contracts import ActionFilter, Concept, Env, Policy
from embodied.errors import ConfigError
from hardware import RobotEnv, make_robot, resolve_robot

DEFAULT_PID: dict[str, Any] = {"kp": 1.0, "ki": 20.0, "kd": 0.0, "rate_limit": None}
"""Default PID gains on the built-in task (knob alpha per m/s of ee_speed error); tune them."""


def pid_params(low: float, high: float, bias: float) -> dict[str, Any]:
    """Every PID parameter the page edits: :class:`controllers.pid.PIDConfig`'s defaults
    (``derivative_cutoff_hz`` aside: ``tau_d`` says the same), :data:`DEFAULT_PID`, the knob's
    range as output limits and its default as bias."""
    from controllers.pid import PIDConfig

    every = {
        f.name: f.default for f in dataclasses.fields(PIDConfig) if f.name != "derivative_cutoff_hz"
    }
    return {**every, **DEFAULT_PID, "output_min": low, "output_max": high, "bias": bias}


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

    config_name: ClassVar[str] = "tune task"
    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "knob",
            lambda c: c.knob in c.policy.knobs(),
            lambda c: (
                f"is not a knob of policy {type(c.policy).__name__}; knobs: "
                f"{sorted(c.policy.knobs())}"
            ),
            "pass --knob with one of the listed knobs",
        ),
        Rule(
            "setpoint_range",
            lambda c: c.setpoint_range[0] < c.setpoint_range[1],
            "is empty",
            "give (low, high) with low < high (concept units)",
        ),
    )

    def __post_init__(self) -> None:
        validate(self)
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


def build_task(
    config: TuneConfig, camera: bool = True, policy_kwargs: dict[str, Any] | None = None
) -> TuneTask:
    """Build the env, policy and concept of ``config`` (default: the built-in steering task).

    The built-in task is ``mujoco:arm_reach`` driven by ``expert_speed_knob`` (the scripted
    expert whose cruise speed is ``base_speed * gain ** alpha``) with concept ``ee_speed``
    (m/s): a PID sets ``alpha`` in [-1, 1] every control step so the fingertip speed tracks
    the setpoint. Setpoints are limited to [0, max action speed].

    Args:
        config: Env id, policy spec, concept and knob names.
        camera: Render the env's default camera (shown on the page).
        policy_kwargs: Extra arguments for ``policies.load``.
    """
    env = (
        sim.make(config.env_id, camera=camera) if camera else sim.make(config.env_id, camera=False)
    )
    spec = "expert_speed_knob" if config.policy == "expert" else config.policy
    kwargs = dict(policy_kwargs or {})
    if config.hold and config.policy == "expert" and config.env_id == "mujoco:arm_reach":
        # the hold mode: the wrapped expert patrols the cubes' hover points, the arm keeps cruising
        speed = float(kwargs.get("base_speed", 0.1))
        kwargs.setdefault(
            "expert", policies.load("expert", env=env, speed=speed, approach="patrol")
        )
    policy = policies.load(spec, env=env, **kwargs)
    if not hasattr(policy, "knobs"):
        raise ConfigError(
            f"policy {config.policy!r} has no knobs to steer",
            fix="use a Steerable policy (e.g. the default expert, or a VLA with steering)",
        )
    concept = make_concept(config.concept)
    knob = policy.knobs().get(config.knob)  # type: ignore[attr-defined]
    if knob is None:
        raise ConfigError(
            f"policy {spec!r} has no knob {config.knob!r}; knobs: {sorted(policy.knobs())}",  # type: ignore[attr-defined]
            fix="pass --knob with one of the listed knobs",
        )
    vel = [i for i, u in enumerate(env.action_spec.units) if u == "m/s"]
    if config.concept == "ee_speed" and vel:
        top = float(np.max(env.action_spec.high_array[vel]))
        setpoint_range = (0.0, round(top, 6))
    else:
        setpoint_range = (-1e3, 1e3)
    lo, hi = float(knob.low[0]), float(knob.high[0])
    params = {
        "pid": pid_params(lo, hi, float(knob.default[0])),
        "fixed": {"value": float(knob.default[0])},
    }
    return TuneTask(env, policy, concept, config.knob, setpoint_range, params=params)


def build_robot_task(
    config: TuneConfig,
    robot: str,
    *,
    dry_run: bool = False,
    max_seconds: float = 20.0,
    setpoint_range: tuple[float, float] = (0.0, 0.5),
    policy_factory: Callable[[Env], Policy] | None = None,
    policy_kwargs: dict[str, Any] | None = None,
) -> TuneTask:
    """A tuning task on a robot through the ROS bridge (or its simulated twin with ``dry_run``).

    The robot is wrapped in :class:`hardware.RobotEnv`; its :class:`hardware.SafetyFilter`
    sits between the policy and the robot in every episode, every episode runs at the control
    rate, and closing the session commands a stop and disconnects.

    Args:
        config: Policy spec (must be Steerable), concept, knob.
        robot: Robot config YAML or ``rosbridge://host:port`` (``hardware.resolve_robot``).
        dry_run: Use the kinematic :class:`hardware.SimRobot` instead of ROS.
        max_seconds: Episode length (s).
        setpoint_range: Allowed setpoints (concept units; m/s for ee_speed).
        policy_factory: Builds the policy from the env instead of ``policies.load``.
        policy_kwargs: Extra arguments for ``policies.load``.
    """
    if not max_seconds > 0:
        raise ConfigError(f"max_seconds {max_seconds} must be > 0 s")
    rcfg = resolve_robot(robot)
    bot = make_robot(rcfg, dry_run=dry_run)
    bot.connect()
    try:
        env = RobotEnv(bot, max_episode_steps=max(1, round(max_seconds * rcfg.control_rate_hz)))
        if policy_factory is not None:
            policy = policy_factory(env)
        else:
            policy = policies.load(config.policy, env=env, **(policy_kwargs or {}))
        knobs = getattr(policy, "knobs", None)
        if not callable(knobs) or config.knob not in knobs():
            have = sorted(knobs()) if callable(knobs) else []
            raise ConfigError(
                f"policy {config.policy!r} has no knob {config.knob!r} to steer (knobs: {have})",
                fix="use a Steerable policy on the robot (e.g. a VLA with a steering direction)",
            )
        knob = knobs()[config.knob]
        lo, hi = float(knob.low[0]), float(knob.high[0])
        params = {
            "pid": pid_params(lo, hi, float(knob.default[0])),
            "fixed": {"value": float(knob.default[0])},
        }
        return TuneTask(
            env,
            policy,
            make_concept(config.concept),
            config.knob,
            setpoint_range,
            params=params,
            safety=env.safety_filter(),
            realtime=True,
            on_close=bot.disconnect,
        )
    except BaseException:
        bot.disconnect()
        raise
