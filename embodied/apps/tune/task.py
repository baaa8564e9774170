"""Build the task ``embodied tune`` runs: env + Steerable policy + concept + knob."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from embodied.apps.tune.configuration_tune import TuneConfig
from embodied.apps.tune.session import TuneTask
from embodied.contracts import Env, Policy
from embodied.errors import ConfigError

DEFAULT_PID: dict[str, Any] = {"kp": 1.0, "ki": 20.0, "kd": 0.0, "rate_limit": None}
"""Default PID gains on the built-in task (knob alpha per m/s of ee_speed error); tune them."""


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
    import numpy as np

    import policies
    import sim
    from embodied.concepts import make_concept

    env = (
        sim.make(config.env_id, camera=camera) if camera else sim.make(config.env_id, camera=False)
    )
    spec = "expert_speed_knob" if config.policy == "expert" else config.policy
    if spec == "expert_speed_knob":
        import policies.steerable_expert
    policy = policies.load(spec, env=env, **(policy_kwargs or {}))
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
        "pid": {**DEFAULT_PID, "output_min": lo, "output_max": hi, "bias": float(knob.default[0])},
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
    import policies
    from embodied.concepts import make_concept
    from hardware import RobotEnv, make_robot, resolve_robot

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
            "pid": {
                **DEFAULT_PID,
                "output_min": lo,
                "output_max": hi,
                "bias": float(knob.default[0]),
            },
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
