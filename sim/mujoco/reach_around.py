"""``mujoco:reach_around``: a multimodal reach-around-obstacles task (the PDP benchmark task).

A planar point mass (slide joints x/y, velocity actuators in m/s) starts below a row of two
obstacles and must reach a goal above it. Three passages lead past the row: **left**,
**center** (the gap between the obstacles) and **right**, so demonstrations are multimodal.
Shifted scenes close passages with walls (``reset(options={"scene": "block_left"})``): a route
through a closed passage gets stuck (``info["blocked"]``) and fails.

Rates: control 20 Hz (50 ms), physics 2 ms (MuJoCo's default timestep), 25 substeps per
control step; horizon 120 steps (6 s). Success: within 3 cm of the goal.

Layout (m, top view)::

    y= 0.30            goal
    y= 0.00   |left|######|center|######|right|      obstacles: |x| in [0.06, 0.24], |y| <= 0.06
    y=-0.30            start                         arena: |x|, |y| <= 0.40
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import mujoco
import numpy as np

from embodied.config import check_options
from embodied.contracts import Env, Policy
from embodied.errors import ConfigError, UnknownNameError
from embodied.specs import Observation, VectorSpec
from sim.mujoco.env import EpisodeExpert, MujocoEnv, as_mujoco_env, check_speed
from sim.mujoco.task import Task

ROUTES: tuple[str, ...] = ("left", "center", "right")
"""Route classes of the expert, by the passage taken through the obstacle row."""

PASSAGE_X: dict[str, float] = {"left": -0.32, "center": 0.0, "right": 0.32}
"""x (m) of each passage's centre line."""

SCENES: dict[str, tuple[str, ...]] = {
    "default": (),
    "block_left": ("left",),
    "block_center": ("center",),
    "block_right": ("right",),
    "block_left_center": ("left", "center"),
    "block_center_right": ("center", "right"),
    "block_left_right": ("left", "right"),
}
"""Scene name -> passages closed by a wall. Every scene leaves at least one passage open."""

AGENT_HEIGHT_M = 0.025
SUCCESS_RADIUS_M = 0.03
START_X_M = (-0.12, 0.12)
START_Y_M = (-0.33, -0.27)
GOAL_X_M = (-0.12, 0.12)
GOAL_Y_M = (0.27, 0.33)
MAX_SPEED_MPS = 0.5
INSTRUCTION = "move the blue ball to the green goal"


def classify_route(xy_path: np.ndarray | Sequence[Sequence[float]]) -> str:
    """Route class of a path by where it first crosses the obstacle row (y = 0).

    Args:
        xy_path: (T, >=2) positions in m (extra columns are ignored).

    Returns:
        ``"left"`` (x < -0.2 m), ``"center"`` (|x| <= 0.2 m), ``"right"`` (x > 0.2 m), or
        ``"none"`` when the path never crosses the row.
    """
    path = np.asarray(xy_path, dtype=np.float64)
    if path.ndim != 2 or path.shape[1] < 2:
        raise ConfigError(f"xy_path must have shape (T, 2), got {path.shape}")
    above = np.flatnonzero(path[:, 1] >= 0.0)
    if above.size == 0:
        return "none"
    i = int(above[0])
    if i == 0:
        x = float(path[0, 0])
    else:
        (x0, y0), (x1, y1) = path[i - 1, :2], path[i, :2]
        x = float(x0 + (x1 - x0) * (0.0 - y0) / (y1 - y0)) if y1 != y0 else float(x1)
    if x < -0.2:
        return "left"
    if x > 0.2:
        return "right"
    return "center"


class ReachAroundTask(Task):
    """Reach a goal around obstacles with a planar point mass.

    Args:
        terminate_on_block: End the episode (``terminated``) when the agent touches a closed
            passage's wall, instead of letting it stay stuck until the horizon.
    """

    name = "reach_around"
    description = "point mass reaches a goal around obstacles (3 route classes, shifted scenes)"
    model_file = "reach_around.xml"
    control_rate_hz = 20.0
    max_episode_steps = 120
    state_spec = VectorSpec(
        names=("pos_x", "pos_y", "vel_x", "vel_y", "goal_dx", "goal_dy", "goal_x", "goal_y"),
        low=(-0.4, -0.4, -1.0, -1.0, -0.8, -0.8, -0.4, -0.4),
        high=(0.4, 0.4, 1.0, 1.0, 0.8, 0.8, 0.4, 0.4),
        units=("m", "m", "m/s", "m/s", "m", "m", "m", "m"),
    )
    action_spec = VectorSpec.uniform(("vx", "vy"), -MAX_SPEED_MPS, MAX_SPEED_MPS, "m/s")
    cameras = ("top",)
    default_image_size = (64, 64)
    default_camera_on = False

    def __init__(self, terminate_on_block: bool = False) -> None:
        self.terminate_on_block = bool(terminate_on_block)
        self.goal = np.zeros(2)
        self._goal_xy = (0.0, 0.0)
        self._xv = (0.0, 0.0, 0.0, 0.0)
        self.scene = "default"
        self.closed: tuple[str, ...] = ()

    def options(self) -> dict[str, Any]:
        """Construction options."""
        return {"terminate_on_block": self.terminate_on_block}

    def instruction(self) -> str:
        """The (fixed) task instruction."""
        return INSTRUCTION

    def bind(self, model: mujoco.MjModel, data: mujoco.MjData) -> None:
        """Cache geom/site ids and blocker appearance."""
        gid = lambda n: mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, n)  # noqa: E731
        self._blocker_ids = {r: gid(f"blocker_{r}") for r in ROUTES}
        self._blocker_set = frozenset(self._blocker_ids.values())
        self._blocker_rgba = {r: model.geom_rgba[i].copy() for r, i in self._blocker_ids.items()}
        self._goal_site = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, "goal")
        self._set_scene(model, "default")

    def _set_scene(self, model: mujoco.MjModel, scene: str) -> None:
        if scene not in SCENES:
            raise UnknownNameError(
                f"unknown reach_around scene {scene!r}; scenes: {sorted(SCENES)}",
                fix="pass reset(options={'scene': <one of those>})",
            )
        self.scene = scene
        self.closed = SCENES[scene]
        for route, i in self._blocker_ids.items():
            on = route in self.closed
            model.geom_conaffinity[i] = 1 if on else 0
            model.geom_rgba[i] = self._blocker_rgba[route] if on else (0.0, 0.0, 0.0, 0.0)

    def initialize_episode(
        self,
        model: mujoco.MjModel,
        data: mujoco.MjData,
        rng: np.random.Generator,
        options: Mapping[str, Any],
    ) -> None:
        """Random start below and goal above the obstacle row; apply the scene.

        Options:
            scene: One of :data:`SCENES` (default ``"default"``).
            start: (x, y) start in m, overriding the random one.
            goal: (x, y) goal in m, overriding the random one.
        """
        self.check_reset_options(
            options, {"scene", "start", "goal"}, "use 'scene', 'start' or 'goal'"
        )
        self._set_scene(model, str(options.get("scene", "default")))
        start = np.array([rng.uniform(*START_X_M), rng.uniform(*START_Y_M)])
        goal = np.array([rng.uniform(*GOAL_X_M), rng.uniform(*GOAL_Y_M)])
        for key, arr in (("start", start), ("goal", goal)):
            if key in options:
                val = np.asarray(options[key], dtype=np.float64)
                if val.shape != (2,) or not np.isfinite(val).all() or (np.abs(val) > 0.37).any():
                    raise ConfigError(
                        f"reset option {key}={options[key]!r} must be a finite (x, y) inside "
                        "|x|, |y| <= 0.37 m",
                        fix="pass a point inside the arena",
                    )
                arr[:] = val
        data.qpos[:2] = start
        self.goal = goal
        self._goal_xy = (float(goal[0]), float(goal[1]))
        model.site_pos[self._goal_site, :2] = goal

    def before_step(self, model: mujoco.MjModel, data: mujoco.MjData, action: np.ndarray) -> None:
        """Velocity command (m/s) -> velocity actuators."""
        data.ctrl = action

    def observe(self, model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
        """State: pos, vel, goal - pos, goal (m, m/s); reuses :meth:`evaluate`'s reads."""
        x, y, vx, vy = self._xv
        gx, gy = self._goal_xy
        return np.array((x, y, vx, vy, gx - x, gy - y, gx, gy), dtype=np.float32)

    def evaluate(
        self, model: mujoco.MjModel, data: mujoco.MjData, info: dict[str, Any]
    ) -> tuple[float, bool]:
        """Success within 3 cm of the goal; ``collided``/``blocked`` from the last contacts."""
        x, y = data.qpos.tolist()
        vx, vy = data.qvel.tolist()
        self._xv = (x, y, vx, vy)
        gx, gy = self._goal_xy
        dist = math.hypot(gx - x, gy - y)
        success = dist < SUCCESS_RADIUS_M
        blocked = False
        ncon = data.ncon
        if ncon and self.closed:
            geoms = data.contact.geom[:ncon]
            blocked = any(int(g) in self._blocker_set for g in geoms.ravel())
        info["success"] = success
        info["ee_pos"] = np.array((x, y, AGENT_HEIGHT_M))
        info["ee_vel"] = np.array((vx, vy, 0.0))
        info["goal_dist"] = dist
        info["collided"] = ncon > 0
        info["blocked"] = blocked
        info["scene"] = self.scene
        return (1.0 if success else 0.0), (blocked and self.terminate_on_block)

    def expert(self, env: Env, **kwargs: Any) -> Policy:
        """:class:`ReachAroundExpert` (kwargs: route, speed, seed)."""
        options = check_options(ReachAroundExpert, kwargs, "mujoco:reach_around expert")
        return ReachAroundExpert(as_mujoco_env(env), **options)


class ReachAroundExpert(EpisodeExpert):
    """Waypoint follower through one passage of ``mujoco:reach_around``.

    Args:
        env: The reach_around env (privileged state: agent position, goal).
        route: ``"left"``, ``"center"``, ``"right"`` or None for a random route per episode.
        speed: Cruise speed in m/s, or None for a random one in ``speed_range`` per episode.
        speed_range: (min, max) cruise speed in m/s when ``speed`` is None.
        avoid_blocked: Pick random routes only among open passages of the current scene.
        seed: Extra seed mixed with the env's episode seed.
    """

    def __init__(
        self,
        env: MujocoEnv,
        route: str | None = None,
        speed: float | None = None,
        speed_range: tuple[float, float] = (0.2, 0.45),
        avoid_blocked: bool = False,
        seed: int = 0,
    ) -> None:
        super().__init__(env, seed)
        if route is not None and route not in ROUTES:
            raise UnknownNameError(
                f"unknown reach_around route {route!r}; routes: {list(ROUTES)}",
                fix="pass route='left', 'center', 'right' or None (random)",
            )
        self.route = route
        self.speed = check_speed(speed, 0.05, MAX_SPEED_MPS, "reach_around")
        lo, hi = (float(x) for x in speed_range)
        check_speed(lo, 0.05, MAX_SPEED_MPS, "reach_around")
        check_speed(hi, lo, MAX_SPEED_MPS, "reach_around")
        self.speed_range = (lo, hi)
        self.avoid_blocked = bool(avoid_blocked)
        self.current_route = ""
        self.current_speed = 0.0
        self._waypoints = np.zeros((0, 2))
        self._i = 0

    def plan(self, rng: np.random.Generator) -> None:
        """Pick route and speed; lay waypoints through the passage with a small jitter."""
        task = self.env.task
        options = [r for r in ROUTES if not (self.avoid_blocked and r in task.closed)]  # type: ignore[attr-defined]
        route = self.route or str(rng.choice(options or list(ROUTES)))
        speed = self.speed if self.speed is not None else float(rng.uniform(*self.speed_range))
        jitter = 0.008 if route == "center" else 0.02
        x = PASSAGE_X[route] + rng.uniform(-jitter, jitter)
        y_in, y_out = -0.12 - rng.uniform(0, 0.03), 0.12 + rng.uniform(0, 0.03)
        goal = np.asarray(task.goal, dtype=np.float64)  # type: ignore[attr-defined]
        self._waypoints = np.array([[x, y_in], [x, y_out], goal])
        self._i = 0
        self.current_route, self.current_speed = route, speed

    def predict_action_chunk(self, obs: Observation) -> np.ndarray:
        """One velocity command (m/s) toward the active waypoint."""
        self._ensure_plan()
        pos = np.asarray(self.env.data.qpos[:2], dtype=np.float64)
        last = len(self._waypoints) - 1
        while self._i < last and np.linalg.norm(self._waypoints[self._i] - pos) < 0.04:
            self._i += 1
        delta = self._waypoints[self._i] - pos
        dist = float(np.linalg.norm(delta))
        speed = self.current_speed if self._i < last else min(self.current_speed, 4.0 * dist)
        action = delta / max(dist, 1e-9) * speed
        return action[None, :]
