"""LIBERO tasks behind the :class:`embodied.contracts.Env` contract.

One owner per conversion: the env hands over LIBERO's raw frames and takes LIBERO-native
actions; the policy's processor owns orientation, JPEG, resizing, cropping and the gripper
convention, and declares what it expects (``Policy.check_compatible`` refuses a mismatch).

Observation (flat dict), exactly what LIBERO's ``OffScreenRenderEnv`` returns for the same
init state and actions (tests/libero/test_libero_reference.py):

* ``state`` (8,): end-effector position ``ee_x, ee_y, ee_z`` (m, world frame), orientation as
  axis-angle ``ee_ax, ee_ay, ee_az`` (rad) and the two finger joints ``gripper_l, gripper_r``
  (m): the ``ee_pos`` + ``ee_ori`` + ``gripper_states`` of LIBERO's demo files, built as
  OpenVLA's evaluation builds its ``state``.
* ``image.agentview`` / ``image.eye_in_hand`` (uint8 ``render_size`` x ``render_size`` x 3):
  the cameras asked for, LIBERO's pixels as rendered and stored in its demo files, in
  OpenGL's row order: orientation ``vertical_flip`` (declared in the observation spec;
  :func:`embodied.specs.upright` turns them upright, OpenVLA's models want them rotated by
  180 degrees, which is the policy's business).
* ``instruction``: the task's language instruction.

Action (7,): ``dx, dy, dz, droll, dpitch, dyaw`` in [-1, 1] (robosuite's OSC_POSE delta
command; +-1 is 0.05 m / 0.5 rad per 50 ms step), then ``gripper`` in [-1, 1], LIBERO's own
convention ``close_positive`` (-1 opens, +1 closes; :attr:`LiberoEnv.gripper_convention`).

``reset(options={"init_state": i})`` starts from LIBERO's fixed init state ``i`` of the task
(default: ``seed % n_init_states``, or 0 without a seed), then runs the protocol's no-op wait
steps. ``reset(options={"placement_seed": s})`` instead lets LIBERO place the objects itself
(its BDDL init regions, numpy seeded with ``s``): scenes from the same distribution as the
fixed init states but not among them, for training data disjoint from the evaluation's.
``info["success"]`` is LIBERO's BDDL goal check after every step.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from embodied.config import check_options
from embodied.contracts import Env, Policy
from embodied.errors import ActionError, ConfigError
from embodied.specs import (
    ImageSpec,
    Observation,
    ObservationSpec,
    VectorSpec,
    image_key,
    upright,
)
from sim.libero.configuration_libero import LiberoProtocol
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
ACTION_SPEC = VectorSpec((*ARM_DIMS, "gripper"), (-1.0,) * 7, (1.0,) * 7, ("1",) * 7)
"""The 7-dim action: OSC_POSE deltas in [-1, 1], then the gripper (-1 opens, +1 closes)."""

NOOP_ACTION = np.array([0, 0, 0, 0, 0, 0, -1], dtype=np.float64)
"""The wait-step action in LIBERO's native convention: hold still, gripper open."""

ORIENTATION = "vertical_flip"
"""Row order of LIBERO's frames: robosuite 1.4 renders with OpenGL's bottom-up read-back."""

LIVE_WAIT_STEPS = 2
"""Wait steps rendered by the cameras (see :meth:`LiberoEnv.reset`). robosuite samples every
observable once per 50 ms control period, on its own timer (after a reset: at the 24th of
the 25 physics steps of each control step, 2 ms before the step ends); two control steps
always hold the sample the first observation returns."""


def _quat2axisangle(quat: np.ndarray) -> np.ndarray:
    """robosuite's quat (x, y, z, w) -> axis-angle (rad), as in LIBERO's dataset scripts.

    The same operations as robosuite's ``quat2axisangle`` (OpenVLA's ``libero_utils``
    copy), without clipping ``quat`` in place.
    """
    w = min(max(float(quat[3]), -1.0), 1.0)
    den = np.sqrt(1.0 - w * w)
    if math.isclose(den, 0.0):
        return np.zeros(3)
    return (quat[:3] * 2.0 * math.acos(w)) / den


class LiberoEnv(Env):
    """One LIBERO task as an :class:`~embodied.contracts.Env`.

    Args:
        task: ``suite``, ``suite:<index>`` or ``suite:<task name>`` (bare suite: task 0), or
            a resolved :class:`~sim.libero.tasks.LiberoTask`.
        protocol: Evaluation protocol (max steps, wait steps, rate, render size, env seed).
        cameras: Cameras to observe (keys of :data:`CAMERAS`, or one comma-separated
            string); ``()`` for state only, the
            fastest (a camera costs ~90-180 ms per frame on a CPU).
        render_size: Camera size (px, square), replacing the protocol's ``render_size``
            (e.g. ``--env-arg render_size=84`` for a policy trained on 84 px
            demonstrations: frames rendered at that size, never resized).
        assets_dir: Local LIBERO assets folder (else ``$EMBODIED_LIBERO_ASSETS``, else the hub).
        record_states: Keep the flattened MuJoCo state after the reset and after every step
            in :attr:`sim_states` (``sim_states[t]`` is the state ``action[t]`` acts on), to
            re-render an episode later (:mod:`sim.libero.recording`).
        hard_reset: Rebuild the MuJoCo model on every reset, as LIBERO's default and OpenVLA's
            evaluation do (~1 s instead of a few ms per reset). Not needed to reproduce
            them: a hard and a soft reset draw the same numbers from numpy's RNG and place
            the fixtures identically, and with the leftovers a soft reset keeps cleared
            (solver warm start, controls, gripper ramp) an episode gives the reference's
            observations exactly (tests/libero/test_libero_reference.py).

    Seeding: LIBERO draws from numpy's global RNG at every reset, hard or soft; of what it
    draws, only the placement of the task's fixtures survives ``set_init_state`` (fixture
    poses are model data, not part of the init states). The reference seeds it once per
    task (``env.seed(0)``: "seed seems to affect object positions even when using fixed
    initial state") and runs its 50 episodes in order, so episode ``i`` starts from the RNG
    state ``i`` resets after the seed; the fixtures move by ~1 cm between episodes, up to
    ~2 cm in x and y (libero_goal, libero_spatial, libero_90). Reseeding every episode (as
    this env did before) gives other placements; not seeding per episode at all would make
    an episode depend on what its worker ran before. So by default the env seeds the
    protocol's ``env_seed`` once, records the RNG state before each of the reference's
    resets (replaying them with cheap soft resets, once per env) and starts init state ``i``
    from state ``i``: the reference's episode ``i``, in any worker, in any order.
    ``reset(seed=...)`` then only seeds gymnasium's ``np_random`` (LIBERO never reads it)
    and picks the init state when ``options`` does not. A per-episode reseed is explicit:
    with ``LiberoProtocol(reseed_on_reset=True)``, ``reset(seed=s)`` reseeds numpy with
    ``s`` (``seed=None`` leaves it as it is). Either way a reset sets numpy's global RNG
    state, as LIBERO's own seeding does.
    """

    gripper_convention = "close_positive"

    def __init__(
        self,
        task: str | LiberoTask = "libero_spatial:0",
        *,
        protocol: LiberoProtocol | None = None,
        cameras: Sequence[str] = ("agentview",),
        render_size: int | None = None,
        assets_dir: str | None = None,
        hard_reset: bool = False,
        record_states: bool = False,
    ) -> None:
        self.protocol = protocol or LiberoProtocol()
        if render_size is not None:
            if isinstance(render_size, bool) or not isinstance(render_size, int):
                raise ConfigError(
                    f"render_size must be an int (px), got {render_size!r}",
                    fix="e.g. render_size=128",
                )
            self.protocol = dataclasses.replace(self.protocol, render_size=render_size)
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
        size = self.protocol.render_size
        self.observation_spec = ObservationSpec(
            STATE_SPEC, {c: ImageSpec(size, size, ORIENTATION) for c in self.cameras}
        )
        self.action_spec = ACTION_SPEC
        self.action_space = gym.spaces.Box(
            self.action_spec.low_array, self.action_spec.high_array, dtype=np.float64
        )
        self._init_states: np.ndarray | None = None
        self._rng_states: list[Any] = []
        self._render = True
        self._raw = self._make_raw(hard_reset)
        close_at_exit(self)
        self._gate_cameras()
        self._t = 0
        self._ee_prev: np.ndarray | None = None
        self._last_raw_obs: dict[str, Any] = {}
        self.init_state_index = -1
        self.placement_seed: int | None = None
        self.episode_count = 0
        self.record_states = bool(record_states)
        self.sim_states: list[np.ndarray] = []

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
    def raw_obs(self) -> Mapping[str, Any]:
        """LIBERO's raw observation dict of the last reset or step (robosuite keys)."""
        return self._last_raw_obs

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

        Does what the reference does (``env.reset()``, ``env.set_init_state(...)``, the wait
        steps) from the reference's RNG state of that episode (see the class docstring), so
        the same init state gives the same episode whatever ran before.

        Args:
            seed: Picks init state ``seed % N`` unless ``options`` does; seeds numpy's RNG
                only with ``LiberoProtocol(reseed_on_reset=True)``.
            options: ``{"init_state": i}`` picks LIBERO's fixed init state ``i`` (0..N-1);
                ``{"placement_seed": s}`` (an int >= 0) seeds numpy with ``s`` and keeps the
                placement LIBERO's reset samples from the task's init regions (no fixed init
                state; ``info["init_state"]`` is -1). The same ``s`` gives the same scene.
        """
        super().reset(seed=seed)
        opts = dict(options or {})
        unknown = sorted(set(opts) - {"init_state", "placement_seed"})
        if unknown:
            raise ConfigError(
                f"unknown LIBERO reset option(s) {unknown}",
                fix="pass {'init_state': i} (a fixed init state) or {'placement_seed': s}",
            )
        placement = opts.get("placement_seed")
        if placement is not None:
            if "init_state" in opts:
                raise ConfigError(
                    f"init_state={opts['init_state']!r} and placement_seed={placement!r}: a "
                    "scene is either a fixed init state or one LIBERO places itself",
                    fix="pass one of the two reset options",
                )
            if not (isinstance(placement, int | np.integer) and int(placement) >= 0):
                raise ConfigError(
                    f"placement_seed {placement!r} is not an int >= 0",
                    fix="pass a non-negative int (numpy's seed for LIBERO's placement)",
                )
            index: Any = -1
        else:
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
        self.placement_seed = None if placement is None else int(placement)
        self.episode_count += 1
        if placement is not None:
            self._raw.seed(int(placement))  # LIBERO's seed(): np.random.seed
        elif not self.protocol.reseed_on_reset:
            np.random.set_state(self._reference_rng_state(self.init_state_index))
        elif seed is not None:
            self._raw.seed(seed)
        wait = self.protocol.num_wait_steps
        # Cameras render only from the last LIVE_WAIT_STEPS wait steps on (each frame costs
        # ~0.1-0.2 s on a CPU). Their observables keep sampling in step with the others (a
        # gated sensor returns black frames meanwhile), so the frames returned are rendered
        # exactly when LIBERO's own env renders them.
        self._render = wait < LIVE_WAIT_STEPS
        try:
            raw_obs = self._raw.reset()
            self._gate_cameras()  # a hard reset installs fresh sensors
            if placement is None:
                raw_obs = self._raw.set_init_state(self.init_states[self.init_state_index])
            # Clear what the flattened init state does not cover and a soft reset keeps
            # (solver warm start, last controls, gripper ramp): a hard reset starts from
            # zeros, and an init state then gives the same episode whatever ran before.
            data = self._raw.env.sim.data
            for buf in (data.qacc_warmstart, data.ctrl, data.qfrc_applied, data.xfrc_applied):
                buf[:] = 0.0
            for robot in self._raw.env.robots:
                gripper: Any = getattr(robot, "gripper", None)
                if gripper is not None and hasattr(gripper, "current_action"):
                    gripper.current_action = np.zeros_like(gripper.current_action)
            success = bool(self._raw.check_success())
            for k in range(wait):
                if k == wait - LIVE_WAIT_STEPS:
                    self._render = True
                raw_obs, _, done, _ = self._raw.step(NOOP_ACTION)
                success = bool(done)
        finally:
            self._render = True
        self._t = 0
        self._ee_prev = None
        self.sim_states = [self._raw.get_sim_state().copy()] if self.record_states else []
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
                fix="send one 7-dim action (6 OSC deltas + gripper: -1 open, +1 close) per step",
            )
        raw_obs, reward, done, _ = self._raw.step(act)
        self._t += 1
        if self.record_states:
            self.sim_states.append(self._raw.get_sim_state().copy())
        success = bool(done)
        obs = self._observe(raw_obs)
        truncated = self._t >= self.max_episode_steps and not success
        return obs, float(reward), success, truncated, self._info(raw_obs, success)

    def expert(self, **kwargs: Any) -> Policy:
        """The scripted expert for this task's BDDL goal (:func:`sim.libero.expert.make_expert`).

        Keyword arguments are :class:`~sim.libero.expert.ExpertConfig` fields.

        Raises:
            ConfigError: an unknown option, or a goal no scripted expert can reach.
        """
        from sim.libero.expert import ExpertConfig, make_expert

        config = ExpertConfig(**check_options(ExpertConfig, kwargs, f"{self.env_id} expert"))
        return make_expert(self, config)

    def render(self) -> np.ndarray:  # type: ignore[override]
        """The agentview camera, upright, at the render size (reuses the observed frame)."""
        img = self._last_raw_obs.get("agentview_image")
        if img is None:
            size = self.protocol.render_size
            img = self._raw.sim.render(camera_name="agentview", height=size, width=size)
        return upright(img, ORIENTATION)

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
    def _reference_rng_state(self, index: int) -> Any:
        """numpy's RNG state before the reference's reset of episode ``index``.

        State 0 is ``seed(env_seed)``; state ``i + 1`` is what LIBERO's reset leaves from
        state ``i``. Missing states are made by replaying resets (soft, cameras not
        rendered: a few ms each; a hard reset draws the same numbers) and kept.
        """
        raw = self._raw
        while len(self._rng_states) <= index:
            if not self._rng_states:
                raw.seed(self.protocol.env_seed)  # LIBERO's seed(): np.random.seed
            else:
                np.random.set_state(self._rng_states[-1])
                hard, raw.env.hard_reset = raw.env.hard_reset, False
                self._render = False
                try:
                    raw.reset()
                finally:
                    raw.env.hard_reset = hard
                    self._render = True
            self._rng_states.append(np.random.get_state())
        return self._rng_states[index]

    def _gate_cameras(self) -> None:
        """Make every camera sensor render only while ``self._render`` is True.

        Otherwise it returns a black frame of the right shape; the observable itself stays
        enabled, so its sampling times match LIBERO's own env.
        """
        from robosuite.utils.observables import sensor

        inner = self._raw.env
        size = self.protocol.render_size
        for cam in self.cameras:
            name = f"{CAMERAS[cam]}_image"
            observable = inner._observables[name]
            real = observable._sensor
            if getattr(real, "_embodied_gated", False):
                continue
            black = np.zeros((size, size, 3), dtype=np.uint8)

            @sensor(modality=real.__modality__)
            def gated(obs_cache: Any, real: Any = real, black: np.ndarray = black) -> Any:
                return real(obs_cache) if self._render else black

            gated._embodied_gated = True  # type: ignore[attr-defined]
            render, self._render = self._render, False  # the validity check calls it
            try:
                inner.modify_observable(name, "sensor", gated)
            finally:
                self._render = render

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
        for cam in self.cameras:
            obs[image_key(cam)] = raw[f"{CAMERAS[cam]}_image"]
        return obs

    def _info(self, raw: Mapping[str, Any], success: bool) -> dict[str, Any]:
        ee = np.asarray(raw["robot0_eef_pos"], dtype=np.float64).copy()
        vel = np.zeros(3) if self._ee_prev is None else (ee - self._ee_prev) * self.control_rate_hz
        self._ee_prev = ee
        return {"success": success, "ee_pos": ee, "ee_vel": vel, "t": self._t}
