"""Scripted LIBERO experts that read privileged simulator state (object poses).

The expert drives LIBERO's own action space: robosuite's ``OSC_POSE`` controller in delta
mode, 7 numbers in [-1, 1] (x, y, z offsets of the goal in world axes, 0.05 m at 1; rotation
about world axes, 0.5 rad at 1; gripper +1 close, -1 open). It reads the goal from the BDDL
problem the env was built from and :func:`make_expert` picks the script for it:

* ``(In obj container_region)``: :class:`LiberoPickPlaceExpert` (all ten ``libero_object``
  tasks, an object into the basket);
* ``(On obj target)``, target an object or a region: :class:`LiberoPutOnExpert`
  (``libero_goal``: the bowl on the plate / stove / cabinet, the cream cheese in the bowl,
  the wine bottle on the cabinet / rack, the plate to the front of the stove);
* ``(Open drawer_region)``: :class:`LiberoDrawerExpert` (grasp the handle, pull along the
  drawer's slide joint);
* ``(In obj drawer_region)``: :class:`LiberoDrawerPlaceExpert` (open that drawer, then put
  the object in).

Other goals (``Turnon``, ``Close``, several predicates) raise :class:`ConfigError`.

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
        rim_grasp_width_m: Objects wider than this in both horizontal directions (m), such
            as bowls and plates, are grasped at the rim nearest the robot instead of at
            the centre (the open gripper spans about 0.08 m). Put-on and drawer-place
            goals only.
        rim_inset_m: Distance from a wide object's near edge to the grasp point (m).
        rim_depth_m: How far below a wide object's top the grip site closes on its rim (m).
        handle_depth_m: How far behind a drawer handle's outer face the grip site closes
            (m); the pads then cover most of the handle's depth.
        handle_approach_m: Distance in front of the handle (along the opening direction)
            where the gripper turns to point at it before going in (m).
        pull_margin_m: How far past the drawer's travel the pull waypoint lies (m); the
            joint limit stops the drawer, the margin keeps the pull force up.
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
    rim_grasp_width_m: float = 0.07
    rim_inset_m: float = 0.008
    rim_depth_m: float = 0.015
    handle_depth_m: float = 0.009
    handle_approach_m: float = 0.06
    pull_margin_m: float = 0.03


def _aabb(inner: Any, body: str) -> tuple[np.ndarray, np.ndarray]:
    """World axis-aligned bounding box (lo, hi) of ``body``'s collision geoms (m)."""
    sm, sd = inner.sim.model, inner.sim.data
    bid = inner.obj_body_id[body]
    root = sm.body_rootid[bid]
    lo, hi = np.full(3, np.inf), np.full(3, -np.inf)
    for g in range(sm.ngeom):
        if sm.body_rootid[sm.geom_bodyid[g]] != root or sm.geom_contype[g] == 0:
            continue
        half = _geom_half_extent(inner, g)
        lo = np.minimum(lo, sd.geom_xpos[g] - half)
        hi = np.maximum(hi, sd.geom_xpos[g] + half)
    if not np.all(np.isfinite(lo)):
        raise ConfigError(f"LIBERO body {body!r} has no collision geometry to grasp")
    return lo, hi


def _geom_half_extent(inner: Any, g: int) -> np.ndarray:
    """Half extent (m) along the world axes of geom ``g``'s axis-aligned box."""
    sm, sd = inner.sim.model, inner.sim.data
    rot = sd.geom_xmat[g].reshape(3, 3)
    if int(sm.geom_type[g]) == 6:  # mjGEOM_BOX: exact extent
        return np.asarray(np.abs(rot) @ sm.geom_size[g], dtype=np.float64)
    if int(sm.geom_type[g]) in (3, 5):  # capsule, cylinder: radius, half-length along z
        r, h = sm.geom_size[g][0], sm.geom_size[g][1]
        return np.asarray(np.abs(rot) @ np.array([r, r, h]), dtype=np.float64)
    return np.full(3, float(sm.geom_rbound[g]))  # meshes and the rest: the bounding sphere


def _collision_geoms(inner: Any, body_id: int) -> list[int]:
    """Collision geoms attached directly to body ``body_id`` (not its children)."""
    sm = inner.sim.model
    return [g for g in range(sm.ngeom) if sm.geom_bodyid[g] == body_id and sm.geom_contype[g]]


def _site_box(inner: Any, site: str) -> tuple[np.ndarray, np.ndarray]:
    """World centre and world-axis half extent (m) of a box region site (LIBERO's ``in_box``)."""
    sm, sd = inner.sim.model, inner.sim.data
    sid = sm.site_name2id(site)
    half = np.abs(sd.site_xmat[sid].reshape(3, 3)) @ sm.site_size[sid]
    return np.array(sd.site_xpos[sid], dtype=np.float64), np.asarray(half, dtype=np.float64)


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

    privileged = True  # reads the simulator's state

    n_action_steps = 1
    gripper_convention = "close_positive"

    # Phase kinds of the script (subclasses with other scripts renumber them).
    _CLOSE_PHASES: tuple[int, ...] = (2,)
    """Phases that close the gripper in place for ``close_steps``."""
    _OPEN_PHASES: tuple[int, ...] = (6,)
    """Phases that open the gripper in place for ``open_steps``."""
    _STALL_PHASES: tuple[int, ...] = (1, 5)
    """Phases where contact may stop the arm short of the waypoint (a stall ends them)."""
    _LOOSE_PHASES: tuple[int, ...] = (3, 4)
    """Carrying phases, reached at twice the position tolerance."""
    _TIGHT_PHASES: tuple[int, ...] = ()
    """Phases reached at 0.3 times the position tolerance (a grasp on a thin handle)."""
    _FINAL_PHASE = 7
    """The last phase: hold its waypoint until the episode ends."""
    _HOLD_UPRIGHT = False
    """Keep the gripper pointing down in every phase (else: only turn it in yaw, early)."""

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
        if phase in self._CLOSE_PHASES:
            done = self._count >= cfg.close_steps
        elif phase in self._OPEN_PHASES:
            done = self._count >= cfg.open_steps
        elif phase >= self._FINAL_PHASE:
            done = False
        else:
            tol = cfg.position_tolerance_m * (2.0 if phase in self._LOOSE_PHASES else 1.0)
            tol *= 0.3 if phase in self._TIGHT_PHASES else 1.0
            yaw_ok = phase != 0 or self._aligned()
            done = (dist < tol and yaw_ok) or (
                phase in self._STALL_PHASES and self._stall >= cfg.stall_steps
            )
            done = done or self._phase_goal_met(phase)
        if done:
            self._phase += 1
            self._count, self._best, self._stall = 0, math.inf, 0
        return done

    def _aligned(self) -> bool:
        """Whether the gripper is turned well enough to leave the first phase."""
        if self._HOLD_UPRIGHT:
            return float(np.linalg.norm(self._upright_action())) * ROT_SCALE_RAD < 0.05
        return not self.config.align_yaw or abs(self._yaw_error()) < 0.05

    def _site_rotation(self) -> np.ndarray:
        """World rotation (3, 3) of the controlled grip site; column 0 runs finger 1 -> 2."""
        sm, sd = self._inner.sim.model, self._inner.sim.data
        site = sm.site_name2id(self._inner.robots[0].controller.eef_name)
        return np.array(sd.site_xmat[site], dtype=np.float64).reshape(3, 3)

    def _desired_rotation(self) -> np.ndarray:
        """Grip-site rotation (3, 3) to hold: pointing straight down, fingers at the yaw."""
        cur = self._site_rotation()
        x = np.array([math.cos(self._yaw), math.sin(self._yaw), 0.0])
        if x @ cur[:, 0] < 0:  # the gripper is symmetric: take the nearer of the two
            x = -x
        z = np.array([0.0, 0.0, -1.0])
        return np.stack([x, np.cross(z, x), z], axis=1)

    def _upright_action(self) -> np.ndarray:
        """Rotation command (3,) that turns the grip site to :meth:`_desired_rotation`.

        Contacts tilt the hand, and a delta controller re-anchors its orientation goal to
        the current pose, so a tilt stays unless corrected (a tilted finger misses a 2 cm
        gap). The error is robosuite's ``orientation_error`` (world axes, rad).
        """
        cur, want = self._site_rotation(), self._desired_rotation()
        err = 0.5 * sum(np.cross(cur[:, k], want[:, k]) for k in range(3))
        return np.asarray(np.clip(err / ROT_SCALE_RAD, -1.0, 1.0), dtype=np.float64)

    def _phase_goal_met(self, phase: int) -> bool:
        """Whether ``phase`` reached its goal other than by position (a joint, say)."""
        del phase
        return False

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
        if self._HOLD_UPRIGHT:
            action[3:6] = self._upright_action()
        elif self.config.align_yaw and self._phase <= 1:
            action[5] = np.clip(self._yaw_error() / ROT_SCALE_RAD, -0.5, 0.5)
        action[6] = grip
        return action[None, :]


# --- other libero_goal goal kinds --------------------------------------------------------


def _unsupported(goal: Any) -> ConfigError:
    """The error for a goal no scripted expert here can reach."""
    return ConfigError(
        f"LIBERO goal {goal} is not one the scripted expert can do (it does one "
        "(In object container_region), (In object drawer_region) after opening the drawer, "
        "(On object target_region/object) or (Open drawer_region) predicate)",
        fix="use the scripted expert on libero_object tasks and libero_goal's put/open tasks; "
        "other goals need an expert not written yet (or demonstrations recorded another way)",
    )


def _drawer_joint(inner: Any, region: str) -> str | None:
    """The slide/hinge joint that moves region site ``region`` (None if it has none).

    LIBERO's ``SiteObject.joints`` lists the joints of the body that owns the site.
    """
    site = inner.object_sites_dict.get(region)
    joints = list(getattr(site, "joints", None) or [])
    return str(joints[0]) if joints else None


class LiberoPutOnExpert(LiberoPickPlaceExpert):
    """Puts the goal's object on a target object or region, or into an open drawer.

    Goals: ``(On obj target)`` where ``target`` is a movable object (the bowl on the
    plate: LIBERO wants the object's origin within 0.03 m of the target's, in contact)
    or a region site (the stove's cook region, the cabinet's top side, a table zone), and
    ``(In obj drawer_region)`` once the drawer is open (:class:`LiberoDrawerPlaceExpert`).
    The phases are the pick-and-place script's; what changes:

    * objects wider than the open gripper (bowls, plates) are grasped at the rim, fingers
      closing across the wall, on the side where the hand clears the other objects
      (preferring the robot's side); a grasp that did not lift the object is retried;
    * the gripper is held pointing straight down (contacts would tilt it);
    * while carrying, the grip site aims so that the *object's* origin (what LIBERO
      checks) ends over the target, whatever the grasp offset;
    * the release height follows the target's surface: the top of the target object, the
      highest collision geom of the region's owner under the region, or a drawer's floor.

    Args:
        env: A :class:`~sim.libero.env.LiberoEnv`.
        config: Tuning (:class:`ExpertConfig`).
        goal: The predicate to reach (default: the task's only goal predicate).
    """

    def __init__(
        self, env: Any, config: ExpertConfig | None = None, goal: tuple[str, ...] | None = None
    ) -> None:
        super().__init__(env, config)
        self._goal_override = goal
        self._hold_xy: np.ndarray | None = None
        self._retries = 0
        self._retry_episode = -1

    _HOLD_UPRIGHT = True

    def _goal(self) -> tuple[str, str, str]:
        inner = self._inner
        goal = [self._goal_override] if self._goal_override else inner.parsed_problem["goal_state"]
        if len(goal) != 1 or len(goal[0]) != 3:
            raise _unsupported(goal)
        pred, obj, target = (str(x) for x in goal[0])
        if obj not in inner.obj_body_id:
            raise _unsupported(goal)
        if pred == "on" and (target in inner.obj_body_id or target in inner.object_sites_dict):
            return pred, obj, target
        if pred == "in" and _drawer_joint(inner, target) is not None:
            return pred, obj, target
        raise _unsupported(goal)

    def _target_xy(self) -> np.ndarray:
        """Live xy (m) the object's origin must reach: the target's origin or site centre."""
        sd = self._inner.sim.data
        if self.target in self._inner.obj_body_id:
            return np.array(sd.body_xpos[self._inner.obj_body_id[self.target]][:2])
        return np.array(sd.get_site_xpos(self.target)[:2], dtype=np.float64)

    def _target_rim(self) -> float:
        """Height (m) to clear while carrying (see :meth:`_surfaces`)."""
        return self._surfaces()[0]

    def _surfaces(self) -> tuple[float, float]:
        """(height to clear while carrying, height the object's bottom is released over), m."""
        inner = self._inner
        sm = inner.sim.model
        if self.target in inner.obj_body_id:  # an object: its top
            top = float(_aabb(inner, self.target)[1][2])
            return top, top
        centre, half = _site_box(inner, self.target)
        joint = _drawer_joint(inner, self.target)
        if joint is not None:  # inside a drawer: clear its walls, release over its floor
            body = int(sm.jnt_bodyid[sm.joint_name2id(joint)])
            tops = [
                float(inner.sim.data.geom_xpos[g][2] + _geom_half_extent(inner, g)[2])
                for g in _collision_geoms(inner, body)
            ]
            return max(tops), float(centre[2] - half[2])
        # A region of a fixture: the highest collision geom of its owner under the region.
        site = inner.object_sites_dict[self.target]
        owner = getattr(site, "parent_name", None)
        top = float(centre[2] + half[2])
        if owner in inner.obj_body_id:
            root = sm.body_rootid[inner.obj_body_id[owner]]
            sd = inner.sim.data
            for g in range(sm.ngeom):
                if sm.body_rootid[sm.geom_bodyid[g]] != root or sm.geom_contype[g] == 0:
                    continue
                gh = _geom_half_extent(inner, g)
                gxy = sd.geom_xpos[g][:2]
                if np.all(np.abs(gxy - centre[:2]) < gh[:2] + half[:2]):
                    top = max(top, float(sd.geom_xpos[g][2] + gh[2]))
        return top, top

    def _plan(self) -> None:
        super()._plan()
        cfg = self.config
        inner = self._inner
        lo, hi = _aabb(inner, self.obj)
        extent = hi[:2] - lo[:2]
        if min(extent) > cfg.rim_grasp_width_m:
            # Too wide to span: close across the rim, fingers' line through the centre, on
            # the side whose hand footprint is clear of other objects (the hand is some
            # 0.2 m long along the fingers), preferring the side facing the robot.
            centre = (lo + hi) / 2
            base = np.asarray(inner.robots[0].base_pos, dtype=np.float64)
            z = max(hi[2] - cfg.rim_depth_m, lo[2] + cfg.min_grasp_height_m)
            best: tuple[float, np.ndarray, int] | None = None
            for axis, sign in ((0, -1.0), (1, -1.0), (1, 1.0), (0, 1.0)):
                direction = np.zeros(2)
                direction[axis] = sign
                xy = centre[:2] + direction * (extent[axis] / 2 - cfg.rim_inset_m)
                cost = self._hand_clutter(xy, axis, z) - 0.1 * float(direction @ (base[:2] - xy))
                if best is None or cost < best[0]:
                    best = (cost, xy, axis)
            assert best is not None
            _, xy, axis = best
            self._grasp = np.array([xy[0], xy[1], z])
            self._yaw = 0.0 if axis == 0 else math.pi / 2
        self._rim, self._floor = self._surfaces()
        self._hold_xy = None
        self._start_body_z = float(inner.sim.data.body_xpos[inner.obj_body_id[self.obj]][2])
        if self._retry_episode != self._planned_for:
            self._retry_episode, self._retries = self._planned_for, 0

    def _hand_clutter(self, xy: np.ndarray, axis: int, z: float) -> float:
        """How many other bodies reach into the hand's footprint at a grasp at ``xy``, ``z``.

        The footprint is a 0.24 m x 0.08 m box (long along ``axis``, the fingers' line)
        from 0.03 m above the grip site up: bodies whose top is lower do not touch it.
        """
        inner = self._inner
        half = np.array([0.04, 0.04])
        half[axis] = 0.12
        count = 0.0
        for name in inner.obj_body_id:
            if name in (self.obj, "main_table"):
                continue
            lo, hi = _aabb(inner, name)
            if hi[2] < z + 0.03:
                continue
            if np.all(lo[:2] < xy + half) and np.all(hi[:2] > xy - half):
                count += 1.0
        return count

    def _carry_xy(self, eef: np.ndarray) -> np.ndarray:
        """Grip-site xy (m) that puts the carried object's origin over the target."""
        obj_xy = self._inner.sim.data.body_xpos[self._inner.obj_body_id[self.obj]][:2]
        return np.asarray(self._target_xy() - (obj_xy - eef[:2]), dtype=np.float64)

    def _waypoint(self) -> tuple[np.ndarray, float, float]:
        phase = self._phase
        if phase == 4 and self._count == 0 and self._retries < 2:
            # The lift is over: if the object stayed down, the grasp missed; plan again.
            lo_z = self._inner.sim.data.body_xpos[self._inner.obj_body_id[self.obj]][2]
            if lo_z < self._start_body_z + 0.02:
                self._retries += 1
                self._plan()
                phase = self._phase
        if phase < 4:
            return super()._waypoint()
        cfg = self.config
        eef = self._eef()
        hang = self._grasp[2] - self._lo_z
        carry_z = self._rim + hang + cfg.clearance_m
        release_z = self._floor + hang + cfg.release_height_m
        if phase >= 6:  # the object is let go: stop following it
            if self._hold_xy is None:
                self._hold_xy = eef[:2].copy()
            xy = self._hold_xy
            if phase == 6:
                return np.array([xy[0], xy[1], release_z]), OPEN, 0.5
            return np.array([xy[0], xy[1], carry_z + 0.05]), OPEN, 0.5
        xy = self._carry_xy(eef)
        if phase == 4:
            return np.array([xy[0], xy[1], carry_z]), CLOSE, cfg.max_speed
        return np.array([xy[0], xy[1], release_z]), CLOSE, 0.5


class LiberoDrawerExpert(LiberoPickPlaceExpert):
    """Opens a drawer: grasps its handle from the front, pulls along the slide, lets go.

    The drawer is the body of the joint that moves the goal's region site; the handle is
    that body's collision geom furthest along the opening direction (the joint's axis in
    world, signed toward LIBERO's open range, from the model). The gripper turns to point
    horizontally into the drawer front with the pads above and below the handle, goes in,
    closes, and pulls along the opening direction until the joint is past the middle of
    LIBERO's open range (or stops moving).

    Phases: in front of the handle -> in -> close -> pull -> open -> back off.

    Args:
        env: A :class:`~sim.libero.env.LiberoEnv`.
        config: Tuning (:class:`ExpertConfig`).
        region: The drawer's region site (default: the task's ``(Open region)`` goal).
    """

    _CLOSE_PHASES = (2,)
    _OPEN_PHASES = (4,)
    _STALL_PHASES = (1, 3)
    _LOOSE_PHASES = ()
    _TIGHT_PHASES = (1,)
    _FINAL_PHASE = 5
    _HOLD_UPRIGHT = True

    def __init__(
        self, env: Any, config: ExpertConfig | None = None, region: str | None = None
    ) -> None:
        super().__init__(env, config)
        self._region = region

    def _goal(self) -> tuple[str, str, str]:
        if self._region is not None:
            return "open", self._region, self._region
        goal = self._inner.parsed_problem["goal_state"]
        if len(goal) != 1 or goal[0][0] != "open" or _drawer_joint(self._inner, goal[0][1]) is None:
            raise _unsupported(goal)
        return "open", str(goal[0][1]), str(goal[0][1])

    def _joint_qpos(self) -> float:
        """The drawer joint's position (m for a slide)."""
        sm = self._inner.sim.model
        return float(self._inner.sim.data.qpos[sm.jnt_qposadr[self._jid]])

    def _plan(self) -> None:
        _, region, _ = self._goal()
        self.obj = self.target = region
        cfg = self.config
        inner = self._inner
        sm, sd = inner.sim.model, inner.sim.data
        site = inner.object_sites_dict[region]
        joint = _drawer_joint(inner, region)
        assert joint is not None  # _goal checked it
        self._jid = int(sm.joint_name2id(joint))
        ranges = inner.get_object(site.parent_name).object_properties["articulation"]
        self._open_q = float(np.mean(ranges["default_open_ranges"]))
        # World direction the handle moves as the drawer opens (horizontal, unit).
        self._sign = 1.0 if self._open_q > self._joint_qpos() else -1.0
        direction = self._sign * np.array(sd.xaxis[self._jid], dtype=np.float64)
        direction[2] = 0.0
        direction /= np.linalg.norm(direction)
        self._dir = direction
        body = int(sm.jnt_bodyid[self._jid])
        handle = max(
            _collision_geoms(inner, body), key=lambda g: float(sd.geom_xpos[g] @ direction)
        )
        self._handle = np.array(sd.geom_xpos[handle], dtype=np.float64)
        half = _geom_half_extent(inner, handle)
        # Pads close on the handle from above and below; the grip site (between the pads'
        # centres) sits handle_depth_m behind the handle's outer face, so the pads cover
        # most of its depth (a shallow grip slips while pulling).
        outer_face = float(self._handle @ direction + np.abs(direction) @ half)
        self._hook = (
            self._handle + (outer_face - cfg.handle_depth_m - self._handle @ direction) * direction
        )
        self._front = self._hook + direction * cfg.handle_approach_m
        travel = abs(
            float(sm.jnt_range[self._jid][1 if self._sign > 0 else 0]) - self._joint_qpos()
        )
        self._pull = self._hook + direction * (travel + cfg.pull_margin_m)
        self._phase, self._count, self._best, self._stall = 0, 0, math.inf, 0
        self._planned_for = int(self.env.episode_count)

    def _desired_rotation(self) -> np.ndarray:
        """Fingers pointing into the drawer front, horizontal, closing vertically.

        A vertical hand cannot reach a lower drawer's handle: the hand is some 5 cm above
        the fingertips and 20 cm wide, and hits the drawers above. Pointing at the handle,
        the hand stays in front of the cabinet and the pads close above and below the bar.
        """
        z = -self._dir
        x = np.array([0.0, 0.0, -1.0])
        if x @ self._site_rotation()[:, 0] < 0:
            x = -x
        return np.stack([x, np.cross(z, x), z], axis=1)

    def _phase_goal_met(self, phase: int) -> bool:
        """The pull ends once the joint is past the middle of LIBERO's open range."""
        return phase == 3 and (self._joint_qpos() - self._open_q) * self._sign >= 0

    def _waypoint(self) -> tuple[np.ndarray, float, float]:
        phase = self._phase
        if phase == 0:  # in front of the handle, turning to point at it
            return self._front, OPEN, 1.0
        if phase == 1:  # in, pads above and below the handle
            return self._hook, OPEN, 0.4
        if phase == 2:
            return self._hook, CLOSE, 0.4
        if phase == 3:
            return self._pull, CLOSE, 0.5
        eef = self._eef()
        if phase == 4:
            return eef, OPEN, 0.5
        return eef + self._dir * 0.02, OPEN, 0.5  # back off the handle


class LiberoDrawerPlaceExpert(Policy):
    """Opens a drawer, then puts the goal's object in it: ``(In obj drawer_region)``.

    Runs :class:`LiberoDrawerExpert` on the region's drawer until its last phase, then
    :class:`LiberoPutOnExpert` with the same goal.

    Args:
        env: A :class:`~sim.libero.env.LiberoEnv`.
        config: Tuning (:class:`ExpertConfig`).
    """

    privileged = True  # reads the simulator's state

    n_action_steps = 1
    gripper_convention = "close_positive"

    def __init__(self, env: Any, config: ExpertConfig | None = None) -> None:
        super().__init__()
        self.env = env
        self.action_dim = 7
        goal = env.raw_env.env.parsed_problem["goal_state"]
        if (
            len(goal) != 1
            or goal[0][0] != "in"
            or _drawer_joint(env.raw_env.env, goal[0][2]) is None
        ):
            raise _unsupported(goal)
        self.drawer = LiberoDrawerExpert(env, config, region=str(goal[0][2]))
        self.place = LiberoPutOnExpert(env, config)
        self._episode = -1
        self._placing = False

    def predict_action_chunk(self, obs: Observation) -> np.ndarray:
        """One OSC delta action of the current stage (drawer, then place)."""
        if self._episode != int(self.env.episode_count):
            self._episode, self._placing = int(self.env.episode_count), False
        if not self._placing and self.drawer._planned_for == self._episode:
            self._placing = self.drawer._phase >= self.drawer._FINAL_PHASE
        return (self.place if self._placing else self.drawer).predict_action_chunk(obs)


def make_expert(env: Any, config: ExpertConfig | None = None) -> Policy:
    """The scripted expert for the BDDL goal of ``env``'s task.

    ``(In obj container_region)``: :class:`LiberoPickPlaceExpert` (libero_object);
    ``(In obj drawer_region)``: :class:`LiberoDrawerPlaceExpert`; ``(On obj target)``:
    :class:`LiberoPutOnExpert`; ``(Open drawer_region)``: :class:`LiberoDrawerExpert`.

    Args:
        env: A :class:`~sim.libero.env.LiberoEnv`.
        config: Tuning (:class:`ExpertConfig`).

    Raises:
        ConfigError: any other goal (several predicates, ``Turnon``, ``Close``, ...).
    """
    inner = env.raw_env.env
    goal = inner.parsed_problem["goal_state"]
    if len(goal) == 1 and len(goal[0]) >= 2:
        pred, *args = (str(x) for x in goal[0])
        if pred == "in" and len(args) == 2 and args[1].endswith("_region"):
            if _drawer_joint(inner, args[1]) is not None:
                return LiberoDrawerPlaceExpert(env, config)
            return LiberoPickPlaceExpert(env, config)
        if pred == "on" and len(args) == 2:
            return LiberoPutOnExpert(env, config)
        if pred == "open" and len(args) == 1 and _drawer_joint(inner, args[0]) is not None:
            return LiberoDrawerExpert(env, config)
    raise _unsupported(goal)
