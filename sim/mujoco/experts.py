"""Scripted experts of the MuJoCo tasks; they read privileged sim state from the env.

Each expert plans at the first action of an episode from a per-episode RNG seeded by
``(env.episode_seed, seed)``, so identical env seeds give identical demonstrations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from embodied.contracts import Policy
from embodied.errors import ConfigError, UnknownNameError
from embodied.specs import Observation

if TYPE_CHECKING:
    from sim.mujoco.env import MujocoEnv


def _check_speed(speed: float | None, low: float, high: float, what: str) -> float | None:
    if speed is None:
        return None
    speed = float(speed)
    if not (np.isfinite(speed) and low <= speed <= high):
        raise ConfigError(
            f"{what} expert speed {speed!r} m/s outside [{low}, {high}] m/s",
            fix=f"pass a speed between {low} and {high} m/s (or None for a random one)",
        )
    return speed


class _EpisodeExpert(Policy):
    """Plans once per env episode (keyed by ``env.episode_count``).

    :meth:`reset` only clears the action queue, so resetting the policy mid-episode keeps the
    route and speed; the next ``env.reset`` triggers a new plan.
    """

    def __init__(self, env: MujocoEnv, seed: int = 0) -> None:
        super().__init__()
        self.env = env
        self.action_dim = env.action_spec.dim
        self.seed = int(seed)
        self._planned_for: int | None = None

    def _ensure_plan(self) -> None:
        if self._planned_for != self.env.episode_count:
            self.plan(np.random.default_rng([self.env.episode_seed, self.seed]))
            self._planned_for = self.env.episode_count

    def plan(self, rng: np.random.Generator) -> None:
        """Build the episode plan from privileged state."""
        raise NotImplementedError


class ReachAroundExpert(_EpisodeExpert):
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
        from sim.mujoco.reach_around import MAX_SPEED_MPS, ROUTES

        super().__init__(env, seed)
        if route is not None and route not in ROUTES:
            raise UnknownNameError(
                f"unknown reach_around route {route!r}; routes: {list(ROUTES)}",
                fix="pass route='left', 'center', 'right' or None (random)",
            )
        self.route = route
        self.speed = _check_speed(speed, 0.05, MAX_SPEED_MPS, "reach_around")
        lo, hi = (float(x) for x in speed_range)
        _check_speed(lo, 0.05, MAX_SPEED_MPS, "reach_around")
        _check_speed(hi, lo, MAX_SPEED_MPS, "reach_around")
        self.speed_range = (lo, hi)
        self.avoid_blocked = bool(avoid_blocked)
        self.current_route = ""
        self.current_speed = 0.0
        self._waypoints = np.zeros((0, 2))
        self._i = 0

    def plan(self, rng: np.random.Generator) -> None:
        """Pick route and speed; lay waypoints through the passage with a small jitter."""
        from sim.mujoco.reach_around import PASSAGE_X, ROUTES

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


class ArmReachExpert(_EpisodeExpert):
    """Moves the arm's fingertip above the named target, then down onto it, at a set speed.

    Args:
        env: The arm_reach env (privileged state: fingertip and target positions).
        speed: End-effector cruise speed in m/s, or None for a random one in ``speed_range``.
        speed_range: (min, max) speed in m/s when ``speed`` is None.
        seed: Extra seed mixed with the env's episode seed.
    """

    def __init__(
        self,
        env: MujocoEnv,
        speed: float | None = None,
        speed_range: tuple[float, float] = (0.05, 0.25),
        seed: int = 0,
    ) -> None:
        from sim.mujoco.arm_reach import MAX_EE_SPEED_MPS

        super().__init__(env, seed)
        self.speed = _check_speed(speed, 0.02, MAX_EE_SPEED_MPS, "arm_reach")
        lo, hi = (float(x) for x in speed_range)
        _check_speed(lo, 0.02, MAX_EE_SPEED_MPS, "arm_reach")
        _check_speed(hi, lo, MAX_EE_SPEED_MPS, "arm_reach")
        self.speed_range = (lo, hi)
        self.current_speed = 0.0
        self._waypoints = np.zeros((0, 3))
        self._i = 0

    def plan(self, rng: np.random.Generator) -> None:
        """Waypoints: above the target (hover height), then the grasp point on it."""
        task = self.env.task
        speed = self.speed if self.speed is not None else float(rng.uniform(*self.speed_range))
        target = np.asarray(task.target_point(self.env.data), dtype=np.float64)  # type: ignore[attr-defined]
        hover = target + np.array([0.0, 0.0, task.hover_height_m])  # type: ignore[attr-defined]
        self._waypoints = np.stack([hover, target])
        self._i = 0
        self.current_speed = speed

    def predict_action_chunk(self, obs: Observation) -> np.ndarray:
        """One (vx, vy, vz, gripper) command toward the active waypoint."""
        self._ensure_plan()
        ee = np.asarray(self.env.task.ee_position(self.env.data), dtype=np.float64)  # type: ignore[attr-defined]
        last = len(self._waypoints) - 1
        while self._i < last and np.linalg.norm(self._waypoints[self._i] - ee) < 0.02:
            self._i += 1
        delta = self._waypoints[self._i] - ee
        dist = float(np.linalg.norm(delta))
        speed = self.current_speed if self._i < last else min(self.current_speed, 3.0 * dist)
        action = np.zeros(self.action_dim)
        action[:3] = delta / max(dist, 1e-9) * speed
        action[3] = -1.0  # gripper open
        return action[None, :]
