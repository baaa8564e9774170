"""Any robosuite 1.4 environment behind the :class:`embodied.contracts.Env` contract.

Env ids are ``robosuite:<EnvName>`` (``robosuite:Lift``, ``robosuite:PickPlaceCan``, ...)::

    env = sim.make("robosuite:Lift", camera=["agentview"], image_size=84)

Mapping (robosuite -> ours):

* ``state``: the robot's proprioception keys (``robot0_joint_pos_cos``, ``robot0_eef_pos``,
  ``robot0_gripper_qpos``, ...) and, with ``object_state=True``, the object keys
  (``cube_pos``, ...), concatenated in a fixed order; each dim is named ``<key>.<i>``.
* ``image.<camera>``: robosuite's ``<camera>_image``, flipped vertically (robosuite renders
  upside down).
* actions: ``env.action_spec`` bounds; names from the controller (OSC_POSE: ``dx, dy, dz,
  droll, dpitch, dyaw, gripper``, normalised to [-1, 1]: +-1 is 0.05 m / 0.5 rad per step).
* ``control_rate_hz`` = robosuite ``control_freq``; ``info["success"]`` = ``_check_success()``;
  ``info["ee_pos"]`` = ``robot0_eef_pos`` (m); ``info["ee_vel"]`` its finite difference (m/s).

robosuite 1.4.0 (the version LIBERO needs) runs on mujoco 3.2.x and numpy 2; its import only
warns about a missing private macro file, which this module silences by providing an empty
one. Seeding: robosuite samples object placements from numpy's global RNG, so
``reset(seed=s)`` seeds ``np.random`` (global state) for reproducible scenes.
"""

from __future__ import annotations

import importlib.util
import re
import string
from collections.abc import Mapping, Sequence
from typing import Any

if importlib.util.find_spec("robosuite") is None:  # optional extra: the registry lists why
    raise ImportError("robosuite is not installed (pip install 'embodied[robosuite]')")

import gymnasium as gym
import numpy as np

from embodied.contracts import Env
from embodied.errors import ConfigError, RenderError, UnknownNameError
from embodied.specs import ImageSpec, Observation, ObservationSpec, VectorSpec, image_key
from sim import ENVS, EnvFamily
from sim.robosuite_runtime import close_at_exit, quiet_robosuite_import

INSTRUCTIONS: dict[str, str] = {
    "Lift": "lift the cube",
    "Stack": "stack the red cube on the green cube",
    "NutAssembly": "fit the nuts onto their pegs",
    "NutAssemblySingle": "fit the nut onto its peg",
    "NutAssemblySquare": "fit the square nut onto the square peg",
    "NutAssemblyRound": "fit the round nut onto the round peg",
    "PickPlace": "put each object into its bin",
    "PickPlaceSingle": "put the object into its bin",
    "PickPlaceMilk": "put the milk carton into its bin",
    "PickPlaceBread": "put the bread into its bin",
    "PickPlaceCereal": "put the cereal box into its bin",
    "PickPlaceCan": "put the can into its bin",
    "Door": "open the door",
    "Wipe": "wipe the markings off the table",
    "TwoArmLift": "lift the pot with both arms",
    "TwoArmPegInHole": "insert the peg into the hole",
    "TwoArmHandover": "hand the hammer over to the other arm",
}
"""Instructions of robosuite 1.4's built-in tasks (robosuite has no language)."""

ACTION_NAMES: dict[str, tuple[str, ...]] = {
    "OSC_POSE": ("dx", "dy", "dz", "droll", "dpitch", "dyaw"),
    "OSC_POSITION": ("dx", "dy", "dz"),
    "IK_POSE": ("dx", "dy", "dz", "droll", "dpitch", "dyaw"),
}
"""Controller type -> names of its arm dims (a gripper dim follows when the robot has one)."""

CAMERA_ALIASES: dict[str, str] = {"eye_in_hand": "robot0_eye_in_hand"}
"""Our camera name -> robosuite camera name (as in the LIBERO adapter)."""

SINGLE_ARM_CAMERAS = (
    "frontview",
    "birdview",
    "agentview",
    "sideview",
    "robot0_robotview",
    "eye_in_hand",
)
"""Cameras of robosuite's single-arm tasks (``eye_in_hand`` = ``robot0_eye_in_hand``)."""

_UNIT_RULES: tuple[tuple[str, str], ...] = (
    (r"joint_pos$", "rad"),
    (r"joint_vel$", "rad/s"),
    (r"gripper_qpos$", "m"),
    (r"gripper_qvel$", "m/s"),
    (r"_pos$", "m"),
    (r"_quat$", "1"),
    (r"_(cos|sin)$", "1"),
)


def _import_robosuite() -> Any:
    quiet_robosuite_import()
    import robosuite

    return robosuite


def _unit(key: str) -> str:
    for pattern, unit in _UNIT_RULES:
        if re.search(pattern, key):
            return unit
    return "1"


def _controller_config(suite: Any, controller: str) -> dict[str, Any]:
    """robosuite's default config of ``controller``.

    Raises:
        UnknownNameError: robosuite has no such controller.
    """
    try:
        ctrl_cfg: dict[str, Any] = suite.load_controller_config(default_controller=controller)
    except Exception as exc:
        raise UnknownNameError(
            f"unknown robosuite controller {controller!r}; controllers: "
            f"{sorted(suite.ALL_CONTROLLERS)}",
            fix="use e.g. OSC_POSE",
        ) from exc
    return ctrl_cfg


def _make_raw(suite: Any, env_name: str, cams: list[str], kwargs: dict[str, Any]) -> Any:
    """``robosuite.make(env_name, **kwargs)``, its camera and GL failures said in our terms.

    Raises:
        ConfigError: the task has none of the cameras ``cams``.
        RenderError: offscreen rendering for ``cams`` failed to start.
    """
    try:
        return suite.make(env_name, **kwargs)
    except ValueError as exc:
        if "_image" in str(exc):
            raise ConfigError(
                f"robosuite:{env_name} has no camera among {cams}: {exc}",
                fix=f"use cameras of the task, e.g. {', '.join(SINGLE_ARM_CAMERAS)}",
            ) from exc
        raise
    except Exception as exc:
        if cams and ("EGL" in repr(exc) or "GL" in type(exc).__name__):
            raise RenderError(
                f"robosuite offscreen rendering failed: {exc}",
                fix="render headless with MUJOCO_GL=egl (apt-get install -y libegl1 "
                "libegl-mesa0) or MUJOCO_GL=osmesa (libosmesa6), or pass camera=False",
            ) from exc
        raise


def _state_layout(spec: Mapping[str, Any], object_state: bool) -> tuple[list[str], VectorSpec]:
    """The raw keys concatenated into ``state`` (robot's, then objects') and its spec.

    Args:
        spec: robosuite's ``observation_spec()`` (key -> example value).
        object_state: Include the task's object keys (privileged).

    Returns:
        The keys in order and the ``state`` spec (dims ``<key>.<i>``, unbounded, units by key).
    """
    skip = {"robot0_proprio-state", "object-state"}
    robot = [k for k in spec if k.startswith("robot") and k not in skip and "image" not in k]
    robot = [k for k in robot if not k.endswith("-state")]
    objects = [
        k
        for k in spec
        if object_state and not k.startswith("robot") and not k.endswith(("_image", "-state"))
    ]
    keys = robot + objects
    names, units = [], []
    for key in keys:
        n = int(np.asarray(spec[key]).size)
        names += [f"{key}.{i}" for i in range(n)]
        units += [_unit(key)] * n
    inf = float("inf")
    state_spec = VectorSpec(tuple(names), (-inf,) * len(names), (inf,) * len(names), tuple(units))
    return keys, state_spec


def _action_names(ctrl_type: str, dim: int) -> tuple[str, ...]:
    """Names of a ``dim``-dim action of controller type ``ctrl_type``: its arm dims and a
    gripper when one dim is left over; ``a0, a1, ...`` for a controller without names."""
    arm = ACTION_NAMES.get(ctrl_type, ())
    if len(arm) == dim - 1:
        return (*arm, "gripper")
    if len(arm) == dim:
        return arm
    return tuple(f"a{i}" for i in range(dim))


class RobosuiteEnv(Env):
    """A robosuite env adapted to the ``embodied`` contract.

    Args:
        env_name: robosuite environment name (``Lift``, ``PickPlaceCan``, ...).
        robots: Robot name(s), e.g. ``"Panda"``.
        controller: robosuite controller type (``OSC_POSE``, ``JOINT_VELOCITY``, ...).
        camera: Cameras in observations: ``True`` for ``agentview``, a name or list of names
            (``eye_in_hand`` is robosuite's ``robot0_eye_in_hand``), ``False`` for none.
        image_size: Camera size in pixels (int or (H, W)).
        control_freq: Control rate in Hz.
        max_episode_steps: Horizon in control steps.
        object_state: Include the task's object observations in ``state`` (privileged).
        instruction: Language instruction (default: :data:`INSTRUCTIONS`).
        offscreen: Create robosuite's offscreen renderer so :meth:`render` works even without
            observed cameras (``False`` skips GL entirely when ``camera=False``).
        **robosuite_kwargs: Passed to ``robosuite.make`` (e.g. ``reward_shaping``).

    Raises:
        UnknownNameError: ``env_name`` is not a robosuite environment.
    """

    def __init__(
        self,
        env_name: str,
        *,
        robots: str | Sequence[str] = "Panda",
        controller: str = "OSC_POSE",
        camera: bool | str | Sequence[str] = False,
        image_size: int | Sequence[int] = 128,
        control_freq: float = 20.0,
        max_episode_steps: int = 200,
        object_state: bool = True,
        instruction: str | None = None,
        offscreen: bool = True,
        **robosuite_kwargs: Any,
    ) -> None:
        suite = _import_robosuite()
        if env_name not in suite.ALL_ENVIRONMENTS:
            raise UnknownNameError(
                f"unknown robosuite env {env_name!r}; envs: {sorted(suite.ALL_ENVIRONMENTS)}",
                fix="use e.g. robosuite:Lift (see `embodied envs`)",
            )
        if control_freq <= 0 or max_episode_steps <= 0:
            raise ConfigError(
                f"control_freq {control_freq} Hz and max_episode_steps {max_episode_steps} "
                "must be positive"
            )
        cams = self._cameras(camera)
        h, w = (image_size, image_size) if isinstance(image_size, int) else map(int, image_size)
        ctrl_cfg = _controller_config(suite, controller)
        kwargs: dict[str, Any] = {
            "robots": robots,
            "controller_configs": ctrl_cfg,
            "has_renderer": False,
            "has_offscreen_renderer": bool(cams) or offscreen,
            "use_camera_obs": bool(cams),
            "camera_names": [CAMERA_ALIASES.get(c, c) for c in cams] or ["agentview"],
            "camera_heights": h,
            "camera_widths": w,
            "control_freq": control_freq,
            "horizon": max_episode_steps,
            "ignore_done": True,
            "hard_reset": False,
            **robosuite_kwargs,
        }
        self.raw = _make_raw(suite, env_name, cams, kwargs)
        close_at_exit(self)
        self.env_id = f"robosuite:{env_name}"
        self.instruction = instruction or INSTRUCTIONS.get(env_name, _words(env_name))
        self.control_rate_hz = float(control_freq)
        self.max_episode_steps = int(max_episode_steps)
        self.camera_names = cams
        self._image_keys = [(f"{CAMERA_ALIASES.get(c, c)}_image", image_key(c)) for c in cams]

        self._state_keys, state_spec = _state_layout(self.raw.observation_spec(), object_state)
        self.observation_spec = ObservationSpec(state_spec, {c: ImageSpec(h, w) for c in cams})

        low, high = self.raw.action_spec
        dim = int(np.asarray(low).size)
        act_names = _action_names(str(ctrl_cfg.get("type", controller)), dim)
        self.action_spec = VectorSpec(
            act_names, tuple(map(float, low)), tuple(map(float, high)), ("1",) * dim
        )
        # robosuite's grippers: -1 opens, +1 closes (embodied.specs.GRIPPER_CONVENTIONS)
        self.gripper_convention = "close_positive" if "gripper" in act_names else None
        self.action_space = gym.spaces.Box(np.asarray(low), np.asarray(high), dtype=np.float64)
        self.observation_space = self._observation_space(state_spec.dim, h, w)
        self.image_size = (h, w)
        self._t = 0
        self._ee_prev = np.zeros(3)

    def _observation_space(self, state_dim: int, h: int, w: int) -> gym.spaces.Dict:
        """The gym space of :meth:`_convert`'s observations (``state``, images, instruction).

        Args:
            state_dim: Length of ``state``.
            h: Camera height in pixels.
            w: Camera width in pixels.
        """
        obs_spaces: dict[str, gym.Space[Any]] = {
            "state": gym.spaces.Box(-np.inf, np.inf, (state_dim,), np.float32)
        }
        for _, key in self._image_keys:
            obs_spaces[key] = gym.spaces.Box(0, 255, (h, w, 3), np.uint8)
        obs_spaces["instruction"] = gym.spaces.Text(
            max_length=256, min_length=0, charset=string.printable
        )
        return gym.spaces.Dict(obs_spaces)

    @staticmethod
    def _cameras(camera: bool | str | Sequence[str]) -> list[str]:
        if camera is False:
            return []
        if camera is True:
            return ["agentview"]
        return [camera] if isinstance(camera, str) else list(camera)

    def _convert(self, raw: Mapping[str, Any]) -> Observation:
        state = np.concatenate([np.ravel(raw[k]) for k in self._state_keys]).astype(np.float32)
        obs: Observation = {"state": state, "instruction": self.instruction}
        for raw_key, key in self._image_keys:
            obs[key] = np.ascontiguousarray(raw[raw_key][::-1])
        return obs

    def _info(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        ee = np.asarray(raw.get("robot0_eef_pos", np.zeros(3)), dtype=np.float64).copy()
        vel = (ee - self._ee_prev) * self.control_rate_hz if self._t > 0 else np.zeros(3)
        self._ee_prev = ee
        return {"success": bool(self.raw._check_success()), "ee_pos": ee, "ee_vel": vel}

    def reset(
        self, *, seed: int | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Reset; ``seed`` seeds numpy's global RNG, which robosuite's placement samplers use."""
        super().reset(seed=seed)
        if options:
            raise ConfigError(f"robosuite envs take no reset options, got {sorted(options)}")
        if seed is not None:
            np.random.seed(seed)
        raw = self.raw.reset()
        self._t = 0
        return self._convert(raw), self._info(raw)

    def step(self, action: Any) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """One control step (robosuite ``control_freq``).

        Raises:
            ActionError: wrong shape or non-finite entries.
        """
        act = self.action_spec.clip(self.action_spec.validate(action))
        raw, reward, _done, _ = self.raw.step(act)
        self._t += 1
        info = self._info(raw)
        truncated = self._t >= self.max_episode_steps
        return self._convert(raw), float(reward), False, truncated, info

    def render(self, camera: str | None = None) -> np.ndarray:  # type: ignore[override]
        """Render ``camera`` (default: the first observed one, else ``agentview``) upright."""
        cam = camera or (self.camera_names[0] if self.camera_names else "agentview")
        cam = CAMERA_ALIASES.get(cam, cam)
        h, w = self.image_size
        try:
            img = self.raw.sim.render(width=w, height=h, camera_name=cam)
        except Exception as exc:
            raise RenderError(
                f"robosuite could not render camera {cam!r}: {type(exc).__name__}: {exc}",
                fix="check the camera name, and render headless with MUJOCO_GL=egl "
                "(apt-get install -y libegl1 libegl-mesa0) or MUJOCO_GL=osmesa (libosmesa6)",
            ) from exc
        return np.ascontiguousarray(img[::-1])

    def close(self) -> None:
        """Close the robosuite env (and its renderer)."""
        self.raw.close()


def _words(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", " ", name).lower()


def make(task: str, **kwargs: Any) -> RobosuiteEnv:
    """Build ``robosuite:<task>``."""
    return RobosuiteEnv(task, **kwargs)


def tasks() -> dict[str, str]:
    """robosuite 1.4's built-in tasks with their instructions (others may be registered)."""
    return {name: f"robosuite: {text}" for name, text in INSTRUCTIONS.items()}


FAMILY = EnvFamily(name="robosuite", make=make, tasks=tasks)
ENVS.register("robosuite", lambda: FAMILY, help="robosuite 1.4 environments (Panda, OSC_POSE)")
