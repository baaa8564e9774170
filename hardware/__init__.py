"""Real robots: the Robot contract, the safety filter, RobotEnv, a simulated robot and ROS.

* :class:`~hardware.robot.Robot` - connect/disconnect, ``read()`` time-stamped state,
  ``send(action)`` returning what was sent; leaving it commands a stop.
* :class:`~hardware.safety.SafetyFilter` - limits, workspace box, watchdog, latching e-stop.
* :class:`~hardware.env.RobotEnv` - a robot as an :class:`embodied.contracts.Env`, so
  :func:`embodied.loop.rollout` drives it unchanged.
* :class:`~hardware.sim_robot.SimRobot` - kinematic robot for ``embodied deploy --dry-run``.
* :mod:`hardware.ros` - the rosbridge (roslibpy) robot; ``hardware.ros.testing`` starts a
  local ROS 1 test graph (rosmaster, sim robot node, upstream rosbridge_server).
"""

from __future__ import annotations

from hardware.configuration_robot import (
    DEFAULT_CONFIG,
    RobotConfig,
    SafetyConfig,
    load_robot_config,
    resolve_robot,
    robot_config_from_dict,
)
from hardware.env import RobotEnv
from hardware.robot import LinkStatus, Robot, RobotState
from hardware.ros.robot import RosRobot
from hardware.safety import SafetyEvent, SafetyFilter
from hardware.sim_robot import SimRobot

__all__ = [
    "DEFAULT_CONFIG",
    "LinkStatus",
    "Robot",
    "RobotConfig",
    "RobotEnv",
    "RobotState",
    "SafetyConfig",
    "SafetyEvent",
    "SafetyFilter",
    "SimRobot",
    "load_robot_config",
    "make_robot",
    "resolve_robot",
    "robot_config_from_dict",
]


def make_robot(config: RobotConfig, dry_run: bool = False) -> Robot:
    """The robot for ``config``: a :class:`SimRobot` when ``dry_run``, else the ROS robot."""
    if dry_run:
        return SimRobot(config)
    return RosRobot(config)
