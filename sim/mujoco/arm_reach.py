"""``mujoco:arm_reach``: a table-top arm reaches the cube named in the instruction.

A 4-DoF arm (base yaw, shoulder/elbow/wrist pitch) with a two-finger gripper stands at the
back of a table holding four coloured cubes (red, green, blue, yellow) at random positions.
The instruction names one (``"reach the red cube"``); success is the fingertip within
``SUCCESS_RADIUS_M`` of the point just above that cube's top face, computed from sim state.

Actions are Cartesian fingertip velocities (m/s, world frame) plus a gripper command in
[-1 (open), 1 (closed)]. The task maps them to joint velocities with closed-form inverse
kinematics, holding the hand vertical (pointing down) with the redundant DoF.
Rates: control 20 Hz, physics 2 ms (25 substeps), horizon 300 steps (15 s, enough for the
expert at 0.02 m/s). Cameras: ``front`` (default, 128x128), ``top`` and ``wrist``. ``info`` carries
caption-friendly state: target colour, distances, the closest cube, the fingertip height, and
which cube was reached (see :meth:`ArmReachTask.evaluate`): ``reached`` (the colour of the first
cube whose grasp point the fingertip came within ``SUCCESS_RADIUS_M`` of this episode, latched;
``""`` before any) and ``wrong_cube_reached`` (bool, latched: a non-target cube's grasp point was
reached at some step). A cube's grasp point is the point ``TARGET_ABOVE_TOP_M`` above its top
face, as for the target. Success still ends the episode; a wrong reach does not.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import mujoco
import numpy as np

from embodied.config import check_options
from embodied.contracts import Env, Policy
from embodied.errors import ConfigError, UnknownNameError
from embodied.specs import Observation, VectorSpec
from sim.mujoco.env import EpisodeExpert, MujocoEnv, as_mujoco_env, check_speed
from sim.mujoco.task import Task

COLORS: tuple[str, ...] = ("red", "green", "blue", "yellow")
"""Cube colours; each episode's instruction names one."""

CUBE_HALF_M = 0.02
PATROL_CENTRE_XY = (0.33, 0.0)
"""Centre (m) of the circle the ``patrol`` expert flies (the middle of the cube area)."""
PATROL_RADIUS_M = 0.1
PATROL_LOOKAHEAD_RAD = 0.6
TARGET_ABOVE_TOP_M = 0.008
SUCCESS_RADIUS_M = 0.025
HOVER_HEIGHT_M = 0.08
MAX_HOVER_M = 0.2  # the highest hover above the grasp point the expert accepts
MAX_EE_SPEED_MPS = 0.3
MAX_JOINT_SPEED_RADPS = 2.5
CUBE_X_M = (0.22, 0.42)
CUBE_Y_M = (-0.18, 0.18)
CUBE_MIN_SEPARATION_M = 0.09
MAX_JITTER_M = 0.05
"""Largest ``jitter`` reset option (m): placed cubes move at most this far per axis."""
HOME_QPOS = np.array([0.0, 0.3, 1.6, np.pi - 1.9])
ARM_JOINTS = ("yaw", "shoulder", "elbow", "wrist")
FINGER_OPEN_M, FINGER_CLOSED_M = 0.005, -0.025
SHOULDER_Z_M = 0.15  # shoulder joint height above the table
LINK_M = 0.28  # upper arm and forearm length
HAND_M = 0.113  # wrist joint to fingertip site
YAW_RANGE = (-1.7, 1.7)
START_X_M = (0.12, 0.5)
START_Z_M = (0.06, 0.3)
"""Bounds (m) of the ``start`` reset option's fingertip x and z (|y| <= 0.3 m)."""
LEVEL_LEAD_M = 0.02
"""The ``level`` approach heads for a point at most this far ahead horizontally (m), at the
cruise height: it climbs or sinks to that height within a few cm, then flies level."""


def _ik(x: float, y: float, z: float) -> list[float]:
    """Joint angles (rad) putting the fingertip at (x, y, z) m with the hand pointing down.

    Unreachable points are projected onto the workspace boundary (the two-link cosine is
    clipped), so the result is always a valid pose.
    """
    yaw = min(max(math.atan2(y, x), YAW_RANGE[0]), YAW_RANGE[1])
    r = math.hypot(x, y)
    dz = z + HAND_M - SHOULDER_Z_M
    c2 = (r * r + dz * dz - 2 * LINK_M * LINK_M) / (2 * LINK_M * LINK_M)
    elbow = math.acos(min(1.0, max(-1.0, c2)))
    shoulder = math.atan2(r, dz) - math.atan2(math.sin(elbow), 1.0 + math.cos(elbow))
    return [yaw, shoulder, elbow, math.pi - shoulder - elbow]


def sample_cube_layout(rng: np.random.Generator) -> np.ndarray:
    """(4, 2) random cube (x, y) positions (m) on the table, at least
    ``CUBE_MIN_SEPARATION_M`` apart (each cube takes its first draw, of up to 1000, that keeps
    the separation)."""
    placed: list[np.ndarray] = []
    for _ in range(len(COLORS)):
        for _attempt in range(1000):
            xy = np.array([rng.uniform(*CUBE_X_M), rng.uniform(*CUBE_Y_M)])
            if all(np.linalg.norm(xy - p) >= CUBE_MIN_SEPARATION_M for p in placed):
                break
        placed.append(xy)
    return np.array(placed)


class ArmReachTask(Task):
    """Reach the named coloured cube with a 4-DoF arm.

    Args:
        target: Colour to reach in every episode, or None for a random colour per episode
            (a reset option ``target`` overrides both).
        privileged_state: Append the target's position relative to the fingertip (m) to the
            state vector (for state-only policies; vision policies read the camera instead).
    """

    name = "arm_reach"
    description = "4-DoF table-top arm reaches the cube named in the instruction (camera)"
    model_file = "arm_reach.xml"
    control_rate_hz = 20.0
    max_episode_steps = 300
    cameras = ("front", "top", "wrist")
    default_image_size = (128, 128)
    default_camera_on = True
    action_spec = VectorSpec(
        names=("vx", "vy", "vz", "gripper"),
        low=(-MAX_EE_SPEED_MPS,) * 3 + (-1.0,),
        high=(MAX_EE_SPEED_MPS,) * 3 + (1.0,),
        units=("m/s", "m/s", "m/s", "1"),
    )
    hover_height_m = HOVER_HEIGHT_M

    def __init__(self, target: str | None = None, privileged_state: bool = False) -> None:
        if target is not None and target not in COLORS:
            raise UnknownNameError(
                f"unknown arm_reach target {target!r}; colours: {list(COLORS)}",
                fix="pass target=None (random) or one of the colours",
            )
        self.fixed_target = target
        self.privileged_state = bool(privileged_state)
        names = [f"q_{j}" for j in ARM_JOINTS] + [f"qd_{j}" for j in ARM_JOINTS]
        units = ["rad"] * 4 + ["rad/s"] * 4
        names += ["ee_x", "ee_y", "ee_z", "ee_vx", "ee_vy", "ee_vz", "gripper"]
        units += ["m", "m", "m", "m/s", "m/s", "m/s", "m"]
        if self.privileged_state:
            names += ["target_dx", "target_dy", "target_dz"]
            units += ["m", "m", "m"]
        inf = float("inf")
        self.state_spec = VectorSpec(
            tuple(names), (-inf,) * len(names), (inf,) * len(names), tuple(units)
        )
        self.target = COLORS[0]
        self.cube_pos = np.zeros((len(COLORS), 3))
        self.ee_pos = np.zeros(3)
        self.ee_vel = np.zeros(3)
        self._ee_xyz = (0.0, 0.0, 0.0)
        self._target_xyz = (0.0, 0.0, 0.0)
        self._cube_xyz: list[tuple[float, float, float]] = []
        self._target_idx = 0
        self._reached = ""
        self._wrong_cube_reached = False

    def options(self) -> dict[str, Any]:
        """Construction options."""
        return {"target": self.fixed_target, "privileged_state": self.privileged_state}

    def bind(self, model: mujoco.MjModel, data: mujoco.MjData) -> None:
        """Cache joint/dof/site/mocap ids and allocate the Jacobian buffers."""
        jid = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, j) for j in ARM_JOINTS]
        self._qadr = np.array([model.jnt_qposadr[j] for j in jid])
        self._dadr = np.array([model.jnt_dofadr[j] for j in jid])
        self._q0, self._d0 = int(self._qadr[0]), int(self._dadr[0])
        if not (np.diff(self._qadr) == 1).all() or not (np.diff(self._dadr) == 1).all():
            raise ConfigError("arm joints must be consecutive in qpos/qvel")
        fl = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, "finger_l")
        self._finger_q = int(model.jnt_qposadr[fl])
        self._site = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, "ee")
        self._mocap = [
            int(model.body_mocapid[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, f"cube_{c}")])
            for c in COLORS
        ]
        self._jacp = np.zeros((3, model.nv))
        self._dt = 1.0 / self.control_rate_hz
        self._state_dim = self.state_spec.dim

    def initialize_episode(
        self,
        model: mujoco.MjModel,
        data: mujoco.MjData,
        rng: np.random.Generator,
        options: Mapping[str, Any],
    ) -> None:
        """Arm at home, cubes at random separated positions, target colour chosen.

        Options:
            target: Colour to reach this episode.
            cubes: Mapping colour -> (x, y) in m to place cubes explicitly.
            jitter: Half-width (m, at most ``MAX_JITTER_M``) of a uniform offset drawn from the
                episode's generator for each axis of every cube placed by ``cubes``: a fixed
                layout whose scenes still differ per seed.
            start: Fingertip start position (x, y, z) in m, hand pointing down (default: the
                home pose, fingertip at about (0.35, 0, 0.21), above the middle of the cubes).
        """
        self.check_reset_options(
            options,
            {"target", "cubes", "scene", "jitter", "start"},
            "use 'target', 'cubes', 'jitter' or 'start'",
        )
        if options.get("scene", "default") != "default":
            raise UnknownNameError(
                f"arm_reach has no scene {options['scene']!r}; scenes: ['default']"
            )
        data.qpos[self._q0 : self._q0 + 4] = self._start_qpos(options.get("start"))
        data.ctrl[4:6] = FINGER_OPEN_M
        data.qpos[self._finger_q : self._finger_q + 2] = FINGER_OPEN_M
        placed = list(sample_cube_layout(rng))
        jitter = options.get("jitter", 0.0)
        if not isinstance(jitter, (int, float)) or not 0.0 <= jitter <= MAX_JITTER_M:
            raise ConfigError(
                f"reset option jitter={jitter!r} is not a half-width in m within "
                f"[0, {MAX_JITTER_M}]",
                fix=f"pass a jitter between 0 and {MAX_JITTER_M} m (0.025 keeps cubes apart)",
            )
        for color, xy in dict(options.get("cubes", {})).items():
            if color not in COLORS:
                raise UnknownNameError(f"unknown cube colour {color!r}; colours: {list(COLORS)}")
            val = np.asarray(xy, dtype=np.float64)
            if (
                val.shape != (2,)
                or not np.isfinite(val).all()
                or not (0.1 <= val[0] <= 0.55 and abs(val[1]) <= 0.3)
            ):
                raise ConfigError(
                    f"reset option cubes[{color!r}]={xy!r} is not an (x, y) on the table "
                    "within reach (0.1 <= x <= 0.55 m, |y| <= 0.3 m)",
                    fix="place cubes inside the reachable table area",
                )
            placed[COLORS.index(color)] = val + rng.uniform(-jitter, jitter, 2) if jitter else val
        target = options.get("target", self.fixed_target)
        if target is None:
            target = COLORS[int(rng.integers(len(COLORS)))]
        if target not in COLORS:
            raise UnknownNameError(
                f"unknown arm_reach target {target!r}; colours: {list(COLORS)}",
                fix="pass one of the colours",
            )
        self.target = str(target)
        self._target_idx = COLORS.index(self.target)
        for i, xy in enumerate(placed):
            self.cube_pos[i] = (xy[0], xy[1], CUBE_HALF_M)
            data.mocap_pos[self._mocap[i]] = self.cube_pos[i]
        self._target_point = self.cube_pos[self._target_idx] + (
            0.0,
            0.0,
            CUBE_HALF_M + TARGET_ABOVE_TOP_M,
        )
        tx, ty, tz = self._target_point.tolist()
        self._target_xyz = (tx, ty, tz)
        self._cube_xyz = [(p[0], p[1], p[2]) for p in self.cube_pos.tolist()]
        self._reached = ""
        self._wrong_cube_reached = False

    @staticmethod
    def _start_qpos(start: Any) -> np.ndarray:
        """Joint angles (rad) of the ``start`` reset option (None: the home pose)."""
        if start is None:
            return HOME_QPOS
        try:
            val = np.asarray(start, dtype=np.float64) if isinstance(start, (list, tuple)) else None
        except (TypeError, ValueError):  # not numbers: refused below with the fix
            val = None
        if (
            val is None
            or val.shape != (3,)
            or not np.isfinite(val).all()
            or not (START_X_M[0] <= val[0] <= START_X_M[1] and abs(val[1]) <= 0.3)
            or not START_Z_M[0] <= val[2] <= START_Z_M[1]
        ):
            raise ConfigError(
                f"reset option start={start!r} is not a fingertip (x, y, z) within reach "
                f"({START_X_M[0]} <= x <= {START_X_M[1]} m, |y| <= 0.3 m, "
                f"{START_Z_M[0]} <= z <= {START_Z_M[1]} m)",
                fix="e.g. start=[0.33, -0.28, 0.15] (beside the cubes), or leave it out",
            )
        return np.array(_ik(*val.tolist()))

    def instruction(self) -> str:
        """``"reach the <colour> cube"``."""
        return f"reach the {self.target} cube"

    def target_point(self, data: mujoco.MjData | None = None) -> np.ndarray:
        """The point the fingertip must reach (m): just above the target cube's top face."""
        return self._target_point.copy()

    def ee_position(self, data: mujoco.MjData) -> np.ndarray:
        """Fingertip position (m) as of the last evaluation."""
        return self.ee_pos.copy()

    def before_step(self, model: mujoco.MjModel, data: mujoco.MjData, action: np.ndarray) -> None:
        """Fingertip velocity (m/s) -> joint velocities through closed-form inverse kinematics.

        The fingertip target one control period ahead, ``ee + v * dt``, is solved for the
        hand-vertical pose (yaw, a two-link problem for shoulder/elbow, the wrist keeping the
        hand pointing down); the joint velocity command is ``(q_target - q) / dt``, scaled
        down uniformly when a joint would exceed ``MAX_JOINT_SPEED_RADPS``.
        """
        vx, vy, vz, grip = action.tolist()
        ex, ey, ez = self._ee_xyz
        dt = self._dt
        q = data.qpos[self._q0 : self._q0 + 4].tolist()
        qt = _ik(ex + vx * dt, ey + vy * dt, ez + vz * dt)
        qd = [(qt[i] - q[i]) / dt for i in range(4)]
        peak = max(abs(v) for v in qd)
        if peak > MAX_JOINT_SPEED_RADPS:
            scale = MAX_JOINT_SPEED_RADPS / peak
            qd = [v * scale for v in qd]
        finger = FINGER_OPEN_M + (FINGER_CLOSED_M - FINGER_OPEN_M) * 0.5 * (grip + 1.0)
        qd.append(finger)
        qd.append(finger)
        data.ctrl = qd

    def observe(self, model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
        """Joint positions/velocities, fingertip position/velocity, finger opening."""
        s = np.empty(self._state_dim, dtype=np.float32)
        s[0:4] = data.qpos[self._q0 : self._q0 + 4]
        s[4:8] = data.qvel[self._d0 : self._d0 + 4]
        s[8:11] = self.ee_pos
        s[11:14] = self.ee_vel
        s[14] = data.qpos[self._finger_q]
        if self.privileged_state:
            s[15:18] = self._target_point - self.ee_pos
        return s

    def evaluate(
        self, model: mujoco.MjModel, data: mujoco.MjData, info: dict[str, Any]
    ) -> tuple[float, bool]:
        """Fingertip position/velocity (Jacobian), success and caption state into ``info``.

        ``info`` keys: ``success`` (fingertip within ``SUCCESS_RADIUS_M`` of the target's grasp
        point), ``ee_pos``, ``ee_vel``, ``target``, ``target_dist`` (m), ``target_dist_xy``
        (m, horizontal), ``closest`` (colour of
        the cube whose centre is nearest the fingertip), ``closest_dist`` (m), ``ee_height``
        (m), and two latched (reset with the episode) outcome keys: ``reached``, the colour of
        the first cube whose grasp point (``TARGET_ABOVE_TOP_M`` above its top face) the
        fingertip came within ``SUCCESS_RADIUS_M`` of this episode (``""`` before any), and
        ``wrong_cube_reached``, True once the fingertip has come within ``SUCCESS_RADIUS_M`` of
        a non-target cube's grasp point.
        """
        mujoco.mj_kinematics(model, data)
        mujoco.mj_comPos(model, data)
        mujoco.mj_jacSite(model, data, self._jacp, None, self._site)
        ee = data.site_xpos[self._site].copy()
        self.ee_pos = ee
        self.ee_vel = self._jacp @ data.qvel
        ex, ey, ez = self._ee_xyz = tuple(ee.tolist())
        best, best_d2 = 0, math.inf
        grasp_dz = CUBE_HALF_M + TARGET_ABOVE_TOP_M
        reach2 = SUCCESS_RADIUS_M * SUCCESS_RADIUS_M
        hit, hit_d2 = -1, reach2  # the nearest grasp point within reach this step
        for i, (cx, cy, cz) in enumerate(self._cube_xyz):
            dxy2 = (cx - ex) ** 2 + (cy - ey) ** 2
            d2 = dxy2 + (cz - ez) ** 2
            if d2 < best_d2:
                best, best_d2 = i, d2
            g2 = dxy2 + (cz + grasp_dz - ez) ** 2  # to this cube's grasp point
            if g2 < reach2:
                if i != self._target_idx:
                    self._wrong_cube_reached = True
                if g2 < hit_d2:
                    hit, hit_d2 = i, g2
        if hit >= 0 and not self._reached:
            self._reached = COLORS[hit]
        tx, ty, tz = self._target_xyz
        target_dist = math.sqrt((tx - ex) ** 2 + (ty - ey) ** 2 + (tz - ez) ** 2)
        success = target_dist < SUCCESS_RADIUS_M
        if success and not self._reached:  # same test as the loop's, rounding aside
            self._reached = self.target
        info["success"] = success
        info["ee_pos"] = ee
        info["ee_vel"] = self.ee_vel
        info["target"] = self.target
        info["target_dist"] = target_dist
        info["target_dist_xy"] = math.hypot(tx - ex, ty - ey)
        info["closest"] = COLORS[best]
        info["closest_dist"] = math.sqrt(best_d2)
        info["ee_height"] = ez
        info["reached"] = self._reached
        info["wrong_cube_reached"] = self._wrong_cube_reached
        return (1.0 if success else 0.0), False

    def caption_state(self) -> dict[str, Any]:
        """Cube positions by colour (m) and the target, for captions of rendered frames."""
        return {
            "target": self.target,
            "cubes": {c: self.cube_pos[i].tolist() for i, c in enumerate(COLORS)},
            "ee_pos": self.ee_pos.tolist(),
        }

    def expert(self, env: Env, **kwargs: Any) -> Policy:
        """:class:`ArmReachExpert` (kwargs: speed, speed_range, seed, approach, cone_radius,
        hover_range)."""
        options = check_options(ArmReachExpert, kwargs, "mujoco:arm_reach expert")
        return ArmReachExpert(as_mujoco_env(env), **options)


class ArmReachExpert(EpisodeExpert):
    """Moves the arm's fingertip above the named target, then down onto it, at a set speed.

    Two ways of approaching (``approach``):

    * ``"waypoints"`` (default, the data of the README's first tables): go to the hover point
      above the target, then down onto it. Which of the two it heads for is internal state
      (the waypoint index), so after a push the same fingertip position can be labelled
      "up to the hover point" or "straight at the target".
    * ``"cone"`` (memoryless): head for the point above the target at height
      ``hover * min(1, e / cone_radius)``, ``e`` the fingertip's horizontal distance to the
      target: far away it is the hover point, within ``cone_radius`` it sinks onto the target.
      The command is a function of the current positions only, so noisy recovery data
      (``embodied collect --action-noise``) labels each state one way.
    * ``"patrol"`` (the tuning page's hold mode): circle the middle of the table at the
      target's hover height (radius ``PATROL_RADIUS_M``), heading for a point a fixed angle
      ahead on the circle at cruise speed, so the arm keeps moving smoothly for the whole
      episode without corners (the task does not succeed): a plant that runs in steady state
      for step tests and tuning.
    * ``"level"`` (memoryless, the height concept's data): head for a point at most
      ``LEVEL_LEAD_M`` ahead horizontally at the hover height, so the arm climbs or sinks to
      it within a few cm and then flies level; within ``cone_radius`` it sinks onto the target
      as ``cone`` does.

    Args:
        env: The arm_reach env (privileged state: fingertip and target positions).
        speed: End-effector cruise speed in m/s, or None for a random one in ``speed_range``.
        speed_range: (min, max) speed in m/s when ``speed`` is None.
        seed: Extra seed mixed with the env's episode seed.
        approach: ``"waypoints"`` or ``"cone"`` (above).
        cone_radius: Horizontal distance (m) within which the ``cone`` and ``level`` approaches
            descend.
        hover_range: (min, max) hover height above the target's grasp point (m), drawn per
            episode after the speed; None: the task's ``hover_height_m`` (0.08 m) every episode.
    """

    APPROACHES = ("waypoints", "cone", "patrol", "level")

    def __init__(
        self,
        env: MujocoEnv,
        speed: float | None = None,
        speed_range: tuple[float, float] = (0.05, 0.25),
        seed: int = 0,
        approach: str = "waypoints",
        cone_radius: float = 0.05,
        hover_range: tuple[float, float] | None = None,
    ) -> None:
        super().__init__(env, seed)
        self.speed = check_speed(speed, 0.02, MAX_EE_SPEED_MPS, "arm_reach")
        lo, hi = (float(x) for x in speed_range)
        check_speed(lo, 0.02, MAX_EE_SPEED_MPS, "arm_reach")
        check_speed(hi, lo, MAX_EE_SPEED_MPS, "arm_reach")
        if approach not in self.APPROACHES:
            raise ConfigError(
                f"approach must be one of {list(self.APPROACHES)}, got {approach!r}",
                fix="e.g. --policy-arg approach=cone",
            )
        radius = float(cone_radius)
        if not (math.isfinite(radius) and radius > 0):
            raise ConfigError(
                f"cone_radius must be a positive distance in m, got {cone_radius!r}",
                fix="e.g. --policy-arg cone_radius=0.05",
            )
        if hover_range is not None:
            hlo, hhi = (float(x) for x in hover_range)
            if not (math.isfinite(hlo) and math.isfinite(hhi) and 0.0 < hlo <= hhi <= MAX_HOVER_M):
                raise ConfigError(
                    f"hover_range {hover_range!r} is not (min, max) heights in m within "
                    f"(0, {MAX_HOVER_M:g}]",
                    fix="e.g. --policy-arg hover_range=[0.04,0.16]",
                )
            hover_range = (hlo, hhi)
        self.hover_range = hover_range
        self.current_hover = float(HOVER_HEIGHT_M)
        """This episode's hover height above the target's grasp point (m)."""
        self.hover_z = math.nan
        """This episode's hover point's height above the table (m): the ``level`` cruise height."""
        self.speed_range = (lo, hi)
        self.approach = approach
        self.cone_radius = radius
        self.current_speed = 0.0
        self._waypoints = np.zeros((0, 3))
        self._patrol = np.zeros(3)
        self._i = 0

    def plan(self, rng: np.random.Generator) -> None:
        """Waypoints: above the target (hover height), then the grasp point on it."""
        task = self.env.task
        speed = self.speed if self.speed is not None else float(rng.uniform(*self.speed_range))
        target = np.asarray(task.target_point(self.env.data), dtype=np.float64)  # type: ignore[attr-defined]
        # drawn after the speed, and only with a range, so the speed draws of earlier data hold
        height = task.hover_height_m if self.hover_range is None else rng.uniform(*self.hover_range)  # type: ignore[attr-defined]
        self.current_hover = float(height)
        self.hover_z = float(target[2] + height)
        hover = target + np.array([0.0, 0.0, self.current_hover])
        self._waypoints = np.stack([hover, target])
        self._i = 0
        self.current_speed = speed
        if self.approach == "patrol":  # the circle's centre, at the target's hover height
            self._patrol = np.array([PATROL_CENTRE_XY[0], PATROL_CENTRE_XY[1], hover[2]])

    def predict_action_chunk(self, obs: Observation) -> np.ndarray:
        """One (vx, vy, vz, gripper) command toward the active waypoint."""
        self._ensure_plan()
        ee = np.asarray(self.env.task.ee_position(self.env.data), dtype=np.float64)  # type: ignore[attr-defined]
        hover, target = self._waypoints[:2]
        if self.approach == "patrol":
            centre = self._patrol
            angle = math.atan2(ee[1] - centre[1], ee[0] - centre[0]) + PATROL_LOOKAHEAD_RAD
            goal = centre + PATROL_RADIUS_M * np.array([math.cos(angle), math.sin(angle), 0.0])
            dist = float(np.linalg.norm(goal - ee))
            speed = self.current_speed
        elif self.approach == "level":
            step = target[:2] - ee[:2]
            e = float(np.linalg.norm(step))
            ahead = ee[:2] + step * min(1.0, LEVEL_LEAD_M / max(e, 1e-9))
            z = target[2] + (hover[2] - target[2]) * min(1.0, e / self.cone_radius)
            goal = np.array([ahead[0], ahead[1], z])
            dist = float(np.linalg.norm(goal - ee))
            speed = min(self.current_speed, 3.0 * float(np.linalg.norm(target - ee)))
        elif self.approach == "cone":
            e = float(np.linalg.norm(target[:2] - ee[:2]))
            goal = target + (hover - target) * min(1.0, e / self.cone_radius)
            dist = float(np.linalg.norm(goal - ee))
            # slow down only near the target itself, not at the (moving) cone point
            speed = min(self.current_speed, 3.0 * float(np.linalg.norm(target - ee)))
        else:
            last = len(self._waypoints) - 1
            while self._i < last and np.linalg.norm(self._waypoints[self._i] - ee) < 0.02:
                self._i += 1
            goal = self._waypoints[self._i]
            dist = float(np.linalg.norm(goal - ee))
            speed = self.current_speed if self._i < last else min(self.current_speed, 3.0 * dist)
        delta = goal - ee
        action = np.zeros(self.action_dim)
        action[:3] = delta / max(dist, 1e-9) * speed
        action[3] = -1.0  # gripper open
        return action[None, :]
