"""Scripted LIBERO experts that read privileged simulator state (object poses).

The expert drives LIBERO's own action space: robosuite's ``OSC_POSE`` controller in delta
mode, 7 numbers in [-1, 1] (x, y, z offsets of the goal in world axes, 0.05 m at 1; rotation
about world axes, 0.5 rad at 1; gripper +1 close, -1 open). It reads the goal from the BDDL
problem the env was built from, so one class serves every task whose goal is one
``(In <object> <container>_contain_region)``: all ten ``libero_object`` tasks (an object into
the basket). Other goals (``On``, ``Open``, several predicates) are refused: a put-on expert
for ``libero_goal``/``libero_spatial`` and a drawer expert are not written yet (this one, run
on "put the bowl on the plate", failed 3 of 3).

Success is LIBERO's own: the env reports ``terminated`` when the BDDL goal holds
(``check_success``); the expert never judges itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from embodied.contracts import Policy
from embodied.errors import ConfigError
from embodied.specs import Observation

POS_SCALE_M = 0.05
"""Goal offset (m) of a full +-1 position command (robosuite ``osc_pose.json`` output_max)."""
ROT_SCALE_RAD = 0.5
"""Goal rotation (rad) of a full +-1 rotation command."""
OPEN, CLOSE = -1.0, 1.0


@dataclass(frozen=True)
class ExpertConfig:
    """Tuning of the scripted pick-and-place expert (world frame, metres, control steps).

    Attributes:
        approach_height_m: Height of the pre-grasp pose above the object's top (m).
        grasp_depth_m: How far below the object's top the grip site closes (m).
        min_grasp_height_m: Lowest grip-site height above the object's bottom (m); keeps
            the fingertips off the floor for flat objects.
        clearance_m: Gap between the carried object's bottom and the container's rim (m).
        release_height_m: Gap between the carried object's bottom and the rim when it is let
            go (m).
        position_tolerance_m: Distance at which a waypoint counts as reached (m).
        max_speed: Largest position command while carrying (fraction of 0.05 m per step).
        close_steps: Steps the gripper closes before lifting (a full swing takes ~8).
        open_steps: Steps the gripper opens before retreating.
        stall_steps: A waypoint the grip site stops approaching for this many steps counts
            as reached (contact stops the arm short of it).
        align_yaw: Turn the gripper so the fingers close across the object's narrower side.
        reach_back: Fraction of an elongated object's half-length by which the grasp moves
            from its centre toward the robot (the arm's reach is shortest low and far out).
    """

    approach_height_m: float = 0.08
    grasp_depth_m: float = 0.03
    min_grasp_height_m: float = 0.012
    clearance_m: float = 0.06
    release_height_m: float = 0.02
    position_tolerance_m: float = 0.01
    max_speed: float = 0.7
    close_steps: int = 12
    open_steps: int = 10
    stall_steps: int = 8
    align_yaw: bool = True
    reach_back: float = 0.4


def _aabb(inner: Any, body: str) -> tuple[np.ndarray, np.ndarray]:
    """World axis-aligned bounding box (lo, hi) of ``body``'s collision geoms (m)."""
    sm, sd = inner.sim.model, inner.sim.data
    bid = inner.obj_body_id[body]
    root = sm.body_rootid[bid]
    lo, hi = np.full(3, np.inf), np.full(3, -np.inf)
    for g in range(sm.ngeom):
        if sm.body_rootid[sm.geom_bodyid[g]] != root or sm.geom_contype[g] == 0:
            continue
        rot = sd.geom_xmat[g].reshape(3, 3)
        if int(sm.geom_type[g]) == 6:  # mjGEOM_BOX: exact extent
            half = np.abs(rot) @ sm.geom_size[g]
        elif int(sm.geom_type[g]) in (3, 5):  # capsule, cylinder: radius, half-length along z
            r, h = sm.geom_size[g][0], sm.geom_size[g][1]
            half = np.abs(rot) @ np.array([r, r, h])
        else:  # meshes and the rest: the bounding sphere
            half = np.full(3, sm.geom_rbound[g])
        lo = np.minimum(lo, sd.geom_xpos[g] - half)
        hi = np.maximum(hi, sd.geom_xpos[g] + half)
    if not np.all(np.isfinite(lo)):
        raise ConfigError(f"LIBERO body {body!r} has no collision geometry to grasp")
    return lo, hi


def _wrap_half_turn(angle: float) -> float:
    """``angle`` (rad) mapped to [-pi/2, pi/2): a parallel gripper is symmetric by pi."""
    return (angle + math.pi / 2) % math.pi - math.pi / 2


class LiberoPickPlaceExpert(Policy):
    """Picks the goal's object and puts it in the goal's container, by a waypoint script.

    Phases: above the object -> down to the grasp height -> close -> lift clear of the
    target's rim -> over the target -> down to the release height -> open -> up. Each
    phase sends proportional position commands, clipped to the controller's range.

    Args:
        env: A :class:`~sim.libero.env.LiberoEnv` (privileged state through ``raw_env``).
        config: Heights, tolerances and step counts (:class:`ExpertConfig`).
    """

    n_action_steps = 1
    gripper_convention = "close_positive"

    def __init__(self, env: Any, config: ExpertConfig | None = None) -> None:
        super().__init__()
        self.env = env
        self.config = config or ExpertConfig()
        self.action_dim = 7
        self._planned_for = -1
        self._phase = 0
        self._count = 0
        self._best = math.inf
        self._stall = 0
        self.obj = ""
        self.target = ""

    # --- privileged state ----------------------------------------------------------------
    @property
    def _inner(self) -> Any:
        return self.env.raw_env.env

    def _goal(self) -> tuple[str, str, str]:
        goal = self._inner.parsed_problem["goal_state"]
        if len(goal) != 1 or goal[0][0] != "in" or not str(goal[0][2]).endswith("_region"):
            raise ConfigError(
                f"LIBERO goal {goal} is not one (In object container_region) predicate",
                fix="use the scripted expert on libero_object tasks; other goals need an expert "
                "not written yet (or demonstrations recorded another way)",
            )
        pred, obj, target = goal[0]
        return str(pred), str(obj), str(target)

    def _eef(self) -> np.ndarray:
        sd, sm = self._inner.sim.data, self._inner.sim.model
        site = sm.site_name2id(self._inner.robots[0].controller.eef_name)
        return np.array(sd.site_xpos[site], dtype=np.float64)

    def _finger_yaw(self) -> float:
        sd, sm = self._inner.sim.data, self._inner.sim.model
        a = sd.body_xpos[sm.body_name2id("gripper0_finger_joint1_tip")]
        b = sd.body_xpos[sm.body_name2id("gripper0_finger_joint2_tip")]
        return math.atan2(b[1] - a[1], b[0] - a[0])

    def _target_xy(self) -> np.ndarray:
        """Live xy centre (m) of the goal region: the container may be nudged during a grasp."""
        return np.array(self._inner.sim.data.get_site_xpos(self.target)[:2], dtype=np.float64)

    def _target_rim(self) -> float:
        """Rim height (m) of the goal region's container (its region site if it has no body)."""
        inner = self._inner
        owner = self.target.rsplit("_", 2)[0]  # basket_1_contain_region -> basket_1
        if owner in inner.obj_body_id:
            return float(_aabb(inner, owner)[1][2])
        return float(inner.sim.data.get_site_xpos(self.target)[2])

    # --- policy ----------------------------------------------------------------------------
    def _plan(self) -> None:
        _, self.obj, self.target = self._goal()
        cfg = self.config
        lo, hi = _aabb(self._inner, self.obj)
        centre = (lo + hi) / 2
        extent = hi[:2] - lo[:2]
        long_axis = int(np.argmax(extent))
        if extent[long_axis] > 1.5 * extent[1 - long_axis]:
            base = np.asarray(self._inner.robots[0].base_pos, dtype=np.float64)
            toward = np.sign(base[long_axis] - centre[long_axis])
            centre[long_axis] += toward * cfg.reach_back * extent[long_axis] / 2
        self._lo_z = float(lo[2])
        self._grasp = np.array(
            [
                centre[0],
                centre[1],
                max(hi[2] - cfg.grasp_depth_m, lo[2] + cfg.min_grasp_height_m),
            ]
        )
        self._top = float(hi[2])
        # The rim walks every geom: once per episode, not per step.
        self._rim = self._target_rim()
        # Fingers close across the narrower horizontal side of the object.
        want = 0.0 if (hi[0] - lo[0]) < (hi[1] - lo[1]) else math.pi / 2
        self._yaw = want
        self._phase, self._count, self._best, self._stall = 0, 0, math.inf, 0
        self._planned_for = int(self.env.episode_count)

    def _waypoint(self) -> tuple[np.ndarray, float, float]:
        """(goal position, gripper command, speed limit) of the current phase."""
        cfg = self.config
        hang = self._grasp[2] - self._lo_z  # object bottom below the grip site (m)
        xy, rim = self._target_xy(), self._rim
        carry_z = rim + hang + cfg.clearance_m
        phase = self._phase
        if phase == 0:  # above the object, open
            return (
                np.array([self._grasp[0], self._grasp[1], self._top + cfg.approach_height_m]),
                OPEN,
                1.0,
            )
        if phase == 1:  # down to the grasp
            return self._grasp, OPEN, 0.5
        if phase == 2:  # close in place
            return self._grasp, CLOSE, 0.5
        if phase == 3:  # lift
            return np.array([self._grasp[0], self._grasp[1], carry_z]), CLOSE, cfg.max_speed
        if phase == 4:  # over the target
            return np.array([xy[0], xy[1], carry_z]), CLOSE, cfg.max_speed
        if phase == 5:  # down to the release height
            return np.array([xy[0], xy[1], rim + hang + cfg.release_height_m]), CLOSE, 0.5
        if phase == 6:  # open
            return np.array([xy[0], xy[1], rim + hang + cfg.release_height_m]), OPEN, 0.5
        return np.array([xy[0], xy[1], carry_z + 0.05]), OPEN, 0.5  # retreat up

    def _advance(self, eef: np.ndarray, goal: np.ndarray) -> bool:
        """Count a step of the current phase; True when it moved to the next phase."""
        cfg = self.config
        dist = float(np.linalg.norm(goal - eef))
        self._count += 1
        if dist < self._best - 1e-3:
            self._best, self._stall = dist, 0
        else:
            self._stall += 1
        phase = self._phase
        if phase == 2:
            done = self._count >= cfg.close_steps
        elif phase == 6:
            done = self._count >= cfg.open_steps
        elif phase == 7:
            done = False
        else:
            tol = cfg.position_tolerance_m * (2.0 if phase in (3, 4) else 1.0)
            yaw_ok = phase != 0 or not cfg.align_yaw or abs(self._yaw_error()) < 0.05
            done = (dist < tol and yaw_ok) or (phase in (1, 5) and self._stall >= cfg.stall_steps)
        if done:
            self._phase += 1
            self._count, self._best, self._stall = 0, math.inf, 0
        return done

    def _yaw_error(self) -> float:
        return _wrap_half_turn(self._yaw - self._finger_yaw())

    def predict_action_chunk(self, obs: Observation) -> np.ndarray:
        """One OSC delta action toward the current phase's waypoint."""
        del obs  # the expert reads privileged state
        if self._planned_for != int(self.env.episode_count):
            self._plan()
        eef = self._eef()
        goal, grip, speed = self._waypoint()
        if self._advance(eef, goal):
            goal, grip, speed = self._waypoint()
        action = np.zeros(7)
        action[:3] = np.clip((goal - eef) / POS_SCALE_M, -speed, speed)
        if self.config.align_yaw and self._phase <= 1:
            action[5] = np.clip(self._yaw_error() / ROT_SCALE_RAD, -0.5, 0.5)
        action[6] = grip
        return action[None, :]
