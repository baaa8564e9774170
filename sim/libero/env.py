"""LIBERO tasks behind the :class:`embodied.contracts.Env` contract.

Observation (flat dict):

* ``state`` (8,): end-effector position ``ee_x, ee_y, ee_z`` (m, world frame), orientation as
  axis-angle ``ee_ax, ee_ay, ee_az`` (rad) and the two finger joints ``gripper_l, gripper_r``
  (m): the ``ee_pos`` + ``ee_ori`` + ``gripper_states`` of LIBERO's demo files.
* ``image.agentview`` / ``image.eye_in_hand`` (uint8 HxWx3): the cameras asked for. With
  ``image_preprocess="none"`` the pixels are LIBERO's as stored in its demo files (rendered
  upside down); ``"openvla"`` rotates them 180 degrees and resizes them (see the protocol).
* ``instruction``: the task's language instruction.

Action (7,): ``dx, dy, dz, droll, dpitch, dyaw`` in [-1, 1] (robosuite's OSC_POSE delta
command; +-1 is 0.05 m / 0.5 rad per 50 ms step), then ``gripper`` in the protocol's
convention (:data:`~sim.libero.configuration_libero.GRIPPER_CONVENTIONS`).

``reset(options={"init_state": i})`` starts from LIBERO's fixed init state ``i`` of the task
(default: ``seed % n_init_states``, or 0 without a seed), then runs the protocol's no-op wait
steps. ``info["success"]`` is LIBERO's BDDL goal check after every step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from embodied.contracts import Env
from embodied.errors import ActionError, ConfigError
from embodied.specs import ImageSpec, Observation, ObservationSpec, VectorSpec, image_key
from sim.libero.configuration_libero import LiberoProtocol
from sim.libero.processing_libero import gripper_to_libero, openvla_image
from sim.libero.resources import load_init_states, resolve_assets
from sim.libero.tasks import LiberoTask, resolve_task
from sim.robosuite_runtime import close_at_exit

CAMERAS: Mapping[str, str] = {
    "agentview": "agentview",
    "eye_in_hand": "robot0_eye_in_hand",
    "frontview": "frontview",
    "birdview": "birdview",
}
"""Our camera name -> robosuite camera name (``image.<ours>`` in observations)."""

STATE_SPEC = VectorSpec(
    ("ee_x", "ee_y", "ee_z", "ee_ax", "ee_ay", "ee_az", "gripper_l", "gripper_r"),
    (-np.inf,) * 8,
    (np.inf,) * 8,
    ("m", "m", "m", "rad", "rad", "rad", "m", "m"),
)
"""The ``state`` vector: LIBERO demos' ee_pos (m), ee_ori (axis-angle, rad), gripper_states (m)."""

ARM_DIMS = ("dx", "dy", "dz", "droll", "dpitch", "dyaw")
NOOP_ACTION = np.array([0, 0, 0, 0, 0, 0, -1], dtype=np.float64)
"""The wait-step action in LIBERO's native convention: hold still, gripper open."""


def action_spec(gripper_convention: str) -> VectorSpec:
    """The 7-dim action spec for a gripper convention (``libero`` or ``openvla``)."""
    g_low = 0.0 if gripper_convention == "openvla" else -1.0
    return VectorSpec(
        (*ARM_DIMS, "gripper"),
        (-1.0,) * 6 + (g_low,),
        (1.0,) * 7,
        ("1",) * 7,
    )


def _quat2axisangle(quat: np.ndarray) -> np.ndarray:
    """robosuite's quat (x, y, z, w) -> axis-angle (rad), as in LIBERO's dataset scripts."""
    w = float(np.clip(quat[3], -1.0, 1.0))
    den = np.sqrt(1.0 - w * w)
    if np.isclose(den, 0.0):
        return np.zeros(3)
    return quat[:3] * 2.0 * np.arccos(w) / den


class LiberoEnv(Env):
    """One LIBERO task as an :class:`~embodied.contracts.Env`.

    Args:
        task: ``suite``, ``suite:<index>`` or ``suite:<task name>`` (bare suite: task 0), or
            a resolved :class:`~sim.libero.tasks.LiberoTask`.
        protocol: Evaluation protocol (max steps, wait steps, rate, image size, gripper).
        cameras: Cameras to observe (keys of :data:`CAMERAS`, or one comma-separated
            string); ``()`` for state only, the
            fastest (a camera costs ~90-180 ms per frame on a CPU).
        assets_dir: Local LIBERO assets folder (else ``$EMBODIED_LIBERO_ASSETS``, else the hub).
        hard_reset: Rebuild the MuJoCo model on every reset (LIBERO's default; ~3 s instead of
            ~0.5 s per reset, and unnecessary since the init state overwrites the sim state).
    """

    def __init__(
        self,
        task: str | LiberoTask = "libero_spatial:0",
        *,
        protocol: LiberoProtocol | None = None,
        cameras: Sequence[str] = ("agentview",),
        assets_dir: str | None = None,
        hard_reset: bool = False,
    ) -> None:
        self.protocol = protocol or LiberoProtocol()
        self.task = task if isinstance(task, LiberoTask) else resolve_task(task)
        if isinstance(cameras, str):  # "agentview,eye_in_hand" from a CLI
            cameras = [c for c in cameras.split(",") if c]
        unknown = [c for c in cameras if c not in CAMERAS]
        if unknown:
            raise ConfigError(
                f"unknown LIBERO camera(s) {unknown}; cameras: {list(CAMERAS)}",
                fix="pick cameras from the list, e.g. agentview,eye_in_hand",
            )
        self.cameras = tuple(dict.fromkeys(cameras))
        self.assets_dir = resolve_assets(assets_dir)
        self.env_id = f"libero:{self.task.env_task}"
        self.instruction = self.task.language
        self.control_rate_hz = float(self.protocol.control_rate_hz)
        self.max_episode_steps = self.protocol.max_steps(self.task.suite)
        size = self.protocol.image_size
        self.observation_spec = ObservationSpec(
            STATE_SPEC, {c: ImageSpec(size, size) for c in self.cameras}
        )
        self.action_spec = action_spec(self.protocol.gripper_convention)
        self.action_space = gym.spaces.Box(
            self.action_spec.low_array, self.action_spec.high_array, dtype=np.float64
        )
        self._init_states: np.ndarray | None = None
        self._raw = self._make_raw(hard_reset)
        close_at_exit(self)
        self._t = 0
        self._ee_prev: np.ndarray | None = None
        self._last_raw_obs: dict[str, Any] = {}
        self.init_state_index = -1

    def _make_raw(self, hard_reset: bool) -> Any:
        from libero.libero.envs import OffScreenRenderEnv

        render = self.protocol.render_size
        return OffScreenRenderEnv(
            bddl_file_name=str(self.task.bddl_file()),
            camera_names=[CAMERAS[c] for c in self.cameras] or ["agentview"],
            camera_heights=render,
            camera_widths=render,
            use_camera_obs=bool(self.cameras),
            control_freq=self.control_rate_hz,
            horizon=10**9,
            ignore_done=True,
            hard_reset=hard_reset,
        )

    @property
    def raw_env(self) -> Any:
        """LIBERO's ``OffScreenRenderEnv`` (for benchmarks and debugging)."""
        return self._raw

    @property
    def init_states(self) -> np.ndarray:
        """LIBERO's fixed init states of this task, (N, state_dim) (N = 50)."""
        if self._init_states is None:
            self._init_states = load_init_states(self.task.init_states_file())
        return self._init_states

    # --- gym API -----------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Reset to a fixed init state, then run the protocol's no-op wait steps.

        The same init state gives the same episode whatever ran before (solver warm start
        and controls are cleared), so a rerun episode reproduces the original.

        Args:
            seed: Seeds LIBERO's RNG; picks init state ``seed % N`` unless ``options`` does.
            options: ``{"init_state": i}`` picks LIBERO's fixed init state ``i`` (0..N-1).
        """
        super().reset(seed=seed)
        opts = dict(options or {})
        unknown = sorted(set(opts) - {"init_state"})
        if unknown:
            raise ConfigError(f"unknown LIBERO reset option(s) {unknown}; options: ['init_state']")
        n = len(self.init_states)
        index = opts.get("init_state")
        if index is None:
            index = 0 if seed is None else seed % n
        if not (isinstance(index, int | np.integer) and 0 <= int(index) < n):
            raise ConfigError(
                f"init_state {index!r} out of range for {self.env_id} ({n} fixed init states)",
                fix=f"pass an int in 0..{n - 1}",
            )
        self.init_state_index = int(index)
        if seed is not None:
            self._raw.seed(seed)
        # Cameras are rendered once, at the final state: not on reset, set_init_state and
        # the wait steps (each frame costs ~0.1-0.2 s on a CPU).
        self._cameras_enabled(False)
        try:
            self._raw.reset()
            self._cameras_enabled(False)  # a hard reset rebuilds the observables
            raw_obs = self._raw.set_init_state(self.init_states[self.init_state_index])
            # Clear what the flattened init state does not cover (solver warm start, last
            # controls, gripper ramp), so an init state gives the same episode whatever ran before.
            data = self._raw.env.sim.data
            for buf in (data.qacc_warmstart, data.ctrl, data.qfrc_applied, data.xfrc_applied):
                buf[:] = 0.0
            for robot in self._raw.env.robots:  # the gripper command ramps; a hard reset zeros it
                gripper: Any = getattr(robot, "gripper", None)
                if gripper is not None and hasattr(gripper, "current_action"):
                    gripper.current_action = np.zeros_like(gripper.current_action)
            success = bool(self._raw.check_success())
            for _ in range(self.protocol.num_wait_steps):
                raw_obs, _, done, _ = self._raw.step(NOOP_ACTION)
                success = bool(done)
        finally:
            self._cameras_enabled(True)
        if self.cameras:
            raw_obs = self._raw.env._get_observations(force_update=True)
        self._t = 0
        self._ee_prev = None
        obs = self._observe(raw_obs)
        info = self._info(raw_obs, success)
        info["init_state"] = self.init_state_index
        return obs, info

    def step(self, action: np.ndarray) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Apply one 50 ms control step; reward 1.0 and ``terminated`` on success."""
        act = np.asarray(action, dtype=np.float64)
        if act.shape != (7,):
            raise ActionError(
                f"LIBERO action has shape {act.shape}, expected (7,) for {self.action_spec.names}",
                fix="send one 7-dim action (6 OSC deltas + gripper) per step",
            )
        if self.protocol.gripper_convention != "libero":
            act = act.copy()
            act[6] = gripper_to_libero(act[6], self.protocol.gripper_convention)
        raw_obs, reward, done, _ = self._raw.step(act)
        self._t += 1
        success = bool(done)
        obs = self._observe(raw_obs)
        truncated = self._t >= self.max_episode_steps and not success
        return obs, float(reward), success, truncated, self._info(raw_obs, success)

    def render(self) -> np.ndarray:  # type: ignore[override]
        """The agentview camera, upright, at the render size (reuses the observed frame)."""
        img = self._last_raw_obs.get("agentview_image")
        if img is None:
            size = self.protocol.render_size
            img = self._raw.sim.render(camera_name="agentview", height=size, width=size)
        return np.ascontiguousarray(img[::-1])

    def close(self) -> None:
        """Release the simulator and its renderer."""
        raw = getattr(self, "_raw", None)
        if raw is not None:
            raw.close()
            self._raw = None

    def describe(self) -> dict[str, Any]:
        """Env description plus the task, protocol and assets folder."""
        d = super().describe()
        d.update(
            suite=self.task.suite,
            task_index=self.task.index,
            task_name=self.task.name,
            cameras=list(self.cameras),
            protocol=self.protocol.to_dict(),
            assets_dir=str(self.assets_dir),
        )
        return d

    # --- helpers -----------------------------------------------------------------------
    def _cameras_enabled(self, enabled: bool) -> None:
        observables = self._raw.env._observables
        for cam in self.cameras:
            obs = observables[f"{CAMERAS[cam]}_image"]
            if obs.is_enabled() != enabled:
                obs.set_enabled(enabled)

    def _observe(self, raw: Mapping[str, Any]) -> Observation:
        self._last_raw_obs = raw  # type: ignore[assignment]
        state = np.concatenate(
            [
                raw["robot0_eef_pos"],
                _quat2axisangle(raw["robot0_eef_quat"]),
                raw["robot0_gripper_qpos"],
            ]
        ).astype(np.float32)
        obs: Observation = {"state": state, "instruction": self.instruction}
        p = self.protocol
        for cam in self.cameras:
            img = raw[f"{CAMERAS[cam]}_image"]
            if p.image_preprocess == "openvla":
                img = openvla_image(img, p.policy_image_size, p.center_crop_scale)
            obs[image_key(cam)] = img
        return obs

    def _info(self, raw: Mapping[str, Any], success: bool) -> dict[str, Any]:
        ee = np.asarray(raw["robot0_eef_pos"], dtype=np.float64).copy()
        vel = np.zeros(3) if self._ee_prev is None else (ee - self._ee_prev) * self.control_rate_hz
        self._ee_prev = ee
        return {"success": success, "ee_pos": ee, "ee_vel": vel, "t": self._t}
