"""The gymnasium wrapper of a MuJoCo :class:`~sim.mujoco.task.Task`.

:class:`MujocoEnv` owns the compiled model and data, seeding, physics substeps and camera
rendering; the task owns everything task-specific. One control step is::

    validate + clip action -> task.before_step -> mj_step x substeps -> task.observe
    -> task.evaluate (success, ee_pos, ee_vel, diagnostics) -> [render cameras]
"""

from __future__ import annotations

import math
import string
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np

from embodied.contracts import Env, Policy
from embodied.errors import ActionError, CompatibilityError, ConfigError
from embodied.specs import ImageSpec, Observation, ObservationSpec, image_key
from sim.mujoco.rendering import CameraRenderer, project_points
from sim.mujoco.task import Task

CameraArg = bool | str | Sequence[str] | None


class MujocoEnv(Env):
    """A deterministic MuJoCo env following the :class:`embodied.contracts.Env` contract.

    Args:
        task: The task logic (model file, specs, success, expert).
        camera: Cameras to render into observations: ``True`` for the task's default camera,
            a camera name, comma-separated names (``"front,top"``) or a list of names,
            ``False`` for none, ``None`` for the task default.
        image_size: Image size in pixels, ``int`` (square) or ``(height, width)``.
        max_episode_steps: Episode horizon in control steps (default: the task's).
        terminate_on_success: End the episode (``terminated=True``) when the task succeeds.
        scene: Default reset option ``scene`` (tasks with shifted scenes), overridable per
            reset with ``reset(options={"scene": ...})``.
        render_mode: Only ``"rgb_array"`` is supported.

    Raises:
        ConfigError: unknown camera, bad image size or horizon.
    """

    def __init__(
        self,
        task: Task,
        *,
        camera: CameraArg = None,
        image_size: int | Sequence[int] | None = None,
        max_episode_steps: int | None = None,
        terminate_on_success: bool = True,
        scene: str | None = None,
        render_mode: str | None = "rgb_array",
    ) -> None:
        self.task = task
        self.model = mujoco.MjModel.from_xml_path(str(task.model_xml_path()))
        self.data = mujoco.MjData(self.model)
        self.env_id = f"mujoco:{task.name}"
        self.control_rate_hz = float(task.control_rate_hz)
        self.max_episode_steps = int(max_episode_steps or task.max_episode_steps)
        if self.max_episode_steps <= 0:
            raise ConfigError(f"max_episode_steps must be positive, got {max_episode_steps}")
        if render_mode not in (None, "rgb_array"):
            raise ConfigError(
                f"render_mode {render_mode!r} is not supported", fix="use render_mode='rgb_array'"
            )
        self.render_mode = render_mode
        self.terminate_on_success = bool(terminate_on_success)
        self._default_options: dict[str, Any] = {} if scene is None else {"scene": scene}
        timestep = float(self.model.opt.timestep)
        self.substeps = max(1, round(1.0 / (self.control_rate_hz * timestep)))
        self.physics_timestep = timestep

        self.camera_names = self._resolve_cameras(camera)
        size = image_size if image_size is not None else task.default_image_size
        h, w = (int(size), int(size)) if isinstance(size, int | np.integer) else map(int, size)
        if not (8 <= h <= 1024 and 8 <= w <= 1024):
            raise ConfigError(
                f"image_size {size!r} outside 8..1024 pixels", fix="pass e.g. image_size=64"
            )
        self.image_size = (h, w)
        vis = self.model.vis.global_
        vis.offwidth, vis.offheight = max(vis.offwidth, w), max(vis.offheight, h)
        self._renderer = CameraRenderer(self.model, h, w)
        self._image_keys = [image_key(c) for c in self.camera_names]

        self.action_spec = task.action_spec
        self.observation_spec = ObservationSpec(
            state=task.state_spec, cameras={c: ImageSpec(h, w) for c in self.camera_names}
        )
        self.action_space = gym.spaces.Box(
            task.action_spec.low_array.astype(np.float32),
            task.action_spec.high_array.astype(np.float32),
            dtype=np.float32,
        )
        spaces: dict[str, gym.Space[Any]] = {
            "state": gym.spaces.Box(-np.inf, np.inf, (task.state_spec.dim,), np.float32)
        }
        for key in self._image_keys:
            spaces[key] = gym.spaces.Box(0, 255, (h, w, 3), np.uint8)
        spaces["instruction"] = gym.spaces.Text(
            max_length=256, min_length=0, charset=string.printable
        )
        self.observation_space = gym.spaces.Dict(spaces)

        self._act_shape = (task.action_spec.dim,)
        self._act_low = task.action_spec.low_array
        self._act_high = task.action_spec.high_array
        self._act = np.zeros(task.action_spec.dim)
        self._t = 0
        self.episode_seed = 0
        self.episode_count = 0
        task.bind(self.model, self.data)
        self.instruction = task.instruction()

    # -- construction helpers -------------------------------------------------------------
    def _resolve_cameras(self, camera: CameraArg) -> list[str]:
        cams = self.task.cameras
        if camera is None:
            camera = self.task.default_camera_on
        if camera is False:
            return []
        if camera is True:
            if not cams:
                raise ConfigError(f"task {self.task.name!r} has no camera")
            return [cams[0]]
        names = (
            [c.strip() for c in camera.split(",") if c.strip()]
            if isinstance(camera, str)
            else list(camera)
        )
        bad = [c for c in names if c not in cams]
        if bad:
            raise ConfigError(
                f"task {self.task.name!r} has no camera(s) {bad}; cameras: {list(cams)}",
                fix=f"pass camera=True or one of {list(cams)}",
            )
        return names

    # -- gymnasium API --------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Start an episode; identical ``seed`` and ``options`` give identical episodes.

        Args:
            seed: Seeds the episode RNG (initial state, targets, expert randomness).
            options: Task reset options, e.g. ``{"scene": "block_left"}`` for reach_around.
        """
        super().reset(seed=seed)
        opts = {**self._default_options, **(options or {})}
        mujoco.mj_resetData(self.model, self.data)
        self.task.initialize_episode(self.model, self.data, self.np_random, opts)
        mujoco.mj_forward(self.model, self.data)
        self.episode_seed = int(self.np_random.integers(0, 2**31 - 1))
        self.instruction = self.task.instruction()
        self.episode_count += 1
        self._t = 0
        info: dict[str, Any] = {}
        self.task.evaluate(self.model, self.data, info)
        return self._observation(), info

    def step(self, action: Any) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Apply ``action`` for one control period (``substeps`` physics steps).

        Raises:
            ActionError: wrong shape or non-finite entries (naming the dims).
        """
        try:
            act = np.asarray(action, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ActionError(
                f"action {action!r} is not a numeric vector for dims {self.action_spec.names}",
                fix=f"pass a float array of shape ({self.action_spec.dim},)",
            ) from exc
        if act.shape != self._act_shape or not math.isfinite(act.dot(act)):
            self.action_spec.validate(act)  # raises ActionError naming the problem
        np.minimum(np.maximum(act, self._act_low, out=self._act), self._act_high, out=self._act)
        model, data = self.model, self.data
        self.task.before_step(model, data, self._act)
        mujoco.mj_step(model, data, self.substeps)
        self._t += 1
        info: dict[str, Any] = {}
        reward, terminated = self.task.evaluate(model, data, info)
        if self.terminate_on_success and info["success"]:
            terminated = True
        truncated = self._t >= self.max_episode_steps
        return self._observation(), reward, terminated, truncated, info

    def _observation(self) -> Observation:
        obs: Observation = {
            "state": self.task.observe(self.model, self.data),
            "instruction": self.instruction,
        }
        if self._image_keys:
            mujoco.mj_kinematics(self.model, self.data)
            for cam, key in zip(self.camera_names, self._image_keys, strict=True):
                obs[key] = self._renderer.render(self.data, cam)
        return obs

    def _camera(self, camera: str | None) -> str:
        """``camera``, or the first enabled camera, or the task's first camera."""
        cam = camera or (self.camera_names[0] if self.camera_names else None)
        if cam is None:
            if not self.task.cameras:
                raise ConfigError(f"task {self.task.name!r} has no camera to render")
            cam = self.task.cameras[0]
        return cam

    def render(self, camera: str | None = None) -> np.ndarray:  # type: ignore[override]
        """Render ``camera`` (default: the first enabled or the task's first camera)."""
        cam = self._camera(camera)
        mujoco.mj_kinematics(self.model, self.data)
        return self._renderer.render(self.data, cam)

    def project(
        self, points: np.ndarray, camera: str | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Pixel coordinates (u = column, v = row, px) and depth (m) of world ``points`` (N, 3)
        in ``camera``'s image (default as :meth:`render`) at this env's image size
        (:func:`project_points`)."""
        cam = self._camera(camera)
        mujoco.mj_kinematics(self.model, self.data)
        return project_points(self.model, self.data, cam, points, *self.image_size)

    def close(self) -> None:
        """Release the GL context (the env can still step; rendering recreates it)."""
        self._renderer.close()
        self._renderer = CameraRenderer(self.model, *self.image_size)

    # -- privileged access ----------------------------------------------------------------

    def expert(self, **kwargs: Any) -> Policy:
        """The task's scripted expert bound to this env (reads privileged sim state).

        Raises:
            ConfigError: an option the task's expert does not take, or a value of the wrong
                type (:func:`embodied.config.check_options`; the message names it).
        """
        return self.task.expert(self, **kwargs)

    def describe(self) -> dict[str, Any]:
        """JSON description including physics timestep (s) and substeps per control step."""
        out = super().describe()
        out.update(
            physics_timestep_s=self.physics_timestep,
            substeps=self.substeps,
            task_options=self.task.options(),
        )
        return out


def as_mujoco_env(env: Env) -> MujocoEnv:
    """``env`` (or the env inside its gymnasium wrappers) as a :class:`MujocoEnv`.

    Raises:
        CompatibilityError: ``env`` is not a MuJoCo task env (its experts read its sim state).
    """
    inner = getattr(env, "unwrapped", env)
    if not isinstance(inner, MujocoEnv):
        raise CompatibilityError(
            f"{type(inner).__name__} is not a MuJoCo task env",
            fix="build the env with sim.make('mujoco:<task>') before asking for its expert",
        )
    return inner


def check_speed(speed: float | None, low: float, high: float, what: str) -> float | None:
    """``speed`` (m/s) checked to lie in ``[low, high]``; None passes (a random speed)."""
    if speed is None:
        return None
    speed = float(speed)
    if not (np.isfinite(speed) and low <= speed <= high):
        raise ConfigError(
            f"{what} expert speed {speed!r} m/s outside [{low}, {high}] m/s",
            fix=f"pass a speed between {low} and {high} m/s (or None for a random one)",
        )
    return speed


class EpisodeExpert(Policy):
    """Base of the scripted experts: plans once per env episode (keyed by ``env.episode_count``).

    The plan comes from a per-episode RNG seeded by ``(env.episode_seed, seed)``, so identical
    env seeds give identical demonstrations. Experts read privileged sim state from the env.

    :meth:`reset` only clears the action queue, so resetting the policy mid-episode keeps the
    route and speed; the next ``env.reset`` triggers a new plan.
    """

    privileged = True  # reads the simulator's state

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
