"""Demonstrations written in LIBERO's own HDF5 layout, cameras rendered by replaying states.

LIBERO's ``scripts/create_dataset.py`` restores the first simulator state of a recording,
replays its actions with the cameras on and stores what the env observes; this module does
the same for episodes recorded here (a scripted expert or any policy): roll out without
cameras (50-75 steps/s on a CPU instead of ~3 with two cameras), keep the flattened MuJoCo
state before every action (``LiberoEnv(record_states=True)``), then replay only the kept
episodes, at any image size, checking every replayed state against the recorded one.

The file (``<task name>_demo.hdf5``) has the layout of LIBERO's official demonstrations:

- ``data`` attributes ``env_name``, ``problem_info`` (JSON, from the BDDL file),
  ``macros_image_convention`` (``"opengl"``: rows bottom-up, as robosuite renders and as
  LIBERO stores and trains on them; OpenVLA turns them by 180 degrees itself),
  ``bddl_file_name``, ``bddl_file_content``, ``env_args`` (JSON), ``num_demos``, ``total``;
- ``data/demo_<i>`` (contiguous from 0) with ``actions`` (T, 7), ``states`` (T, S),
  ``robot_states`` (T, 9), ``rewards`` and ``dones`` (uint8, 1 at the last step only) and
  ``obs/{agentview_rgb, eye_in_hand_rgb}`` (T, H, W, 3) uint8, ``obs/{ee_pos, ee_ori,
  ee_states, gripper_states, joint_states}`` (float64); attributes ``num_samples``,
  ``model_file`` (MJCF XML) and ``init_state`` (= ``states[0]``).

One named difference: here ``obs[t]`` and ``states[t]`` are both the observation and state
*before* ``actions[t]`` (the pairing a policy sees, as in OpenVLA's regenerated files);
LIBERO's official files pair the state before ``actions[t]`` with the observation after it
(``data.attrs["embodied_obs_alignment"]`` records ``"before_action"``). Nothing is cut from
the start (LIBERO's script drops its first 5 steps because its force sensor had not
settled; the env here has already run the protocol's wait steps).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from embodied.errors import ConfigError, DatasetError
from embodied.io import atomic_path
from sim.libero.env import CAMERAS

OBS_ALIGNMENT = "before_action"
"""Value of ``data.attrs["embodied_obs_alignment"]`` in files written here."""

CAMERA_KEYS: dict[str, str] = {"agentview": "agentview_rgb", "eye_in_hand": "eye_in_hand_rgb"}
"""Our camera name -> LIBERO demonstration obs key (the two cameras LIBERO records)."""


@dataclass
class RecordedEpisode:
    """States and actions of one rollout, enough to re-render it.

    Attributes:
        states: (T, S) flattened MuJoCo states (``sim.get_state().flatten()``), each before
            the action of the same row.
        actions: (T, 7) LIBERO OSC actions sent to the env.
        model_xml: The MJCF model the states belong to (``sim.model.get_xml()``).
        init_state: Index of LIBERO's fixed init state the episode started from (-1: none).
        placement_seed: numpy seed of the placement LIBERO sampled itself, for an episode
            reset with ``options={"placement_seed": s}`` (``None``: a fixed init state).
        success: Whether LIBERO's ``check_success`` held at the end.
        labels: (T, 7) actions to learn when they differ from the executed ``actions`` (DART's
            clean expert actions under injected noise), or None. The file then holds them as
            ``actions`` and the executed ones as ``executed_actions`` (what a replay needs).
    """

    states: np.ndarray
    actions: np.ndarray
    model_xml: str
    init_state: int = -1
    success: bool = False
    placement_seed: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    labels: np.ndarray | None = None


def recorded_episode(env: Any, actions: np.ndarray, success: bool) -> RecordedEpisode:
    """The episode a LIBERO env just ran with ``record_states=True``: a state per action.

    Args:
        env: The :class:`~sim.libero.env.LiberoEnv` (or a wrapper) after the episode.
        actions: (T, 7) actions the episode sent (``Episode.actions``).
        success: Whether the episode succeeded.

    Raises:
        DatasetError: the env did not record a state before every action.
    """
    base = getattr(env, "unwrapped", env)
    actions = np.asarray(actions, dtype=np.float64)
    states = list(getattr(base, "sim_states", []))
    if len(states) < len(actions):
        raise DatasetError(
            f"the env recorded {len(states)} states for {len(actions)} actions",
            fix="make the LIBERO env with record_states=True before rolling out",
        )
    return RecordedEpisode(
        states=np.stack(states[: len(actions)]),
        actions=actions,
        model_xml=str(base.raw_env.env.sim.model.get_xml()),
        init_state=int(base.init_state_index),
        placement_seed=getattr(base, "placement_seed", None),
        success=success,
    )


def _problem_info(bddl: Path) -> dict[str, Any]:
    from libero.libero.envs.bddl_utils import get_problem_info

    return dict(get_problem_info(str(bddl)))


REPLAY_TOLERANCE = 1e-6
"""Largest difference between a replayed and a recorded state (same build: exactly equal)."""


def render_episode(
    render_env: Any, episode: RecordedEpisode, cameras: Sequence[str]
) -> dict[str, np.ndarray]:
    """LIBERO demonstration ``obs`` and ``robot_states`` of ``episode``, by replaying it.

    As LIBERO's ``create_dataset.py``: start from the episode's first state, replay its
    actions with the cameras on and keep the observations the env returns, so the frames are
    exactly those a policy would have seen live (rendering a bare state would not: robosuite
    samples its sensors before the last physics substep of a control step). The replay is
    checked against every recorded state.

    Args:
        render_env: A :class:`~sim.libero.env.LiberoEnv` of the same task whose cameras are
            ``cameras`` (at the wanted size).
        episode: The recorded states and actions.
        cameras: Our camera names to render (keys of :data:`CAMERA_KEYS`).

    Returns:
        LIBERO obs key -> (T, ...) array, plus ``robot_states``.

    Raises:
        DatasetError: the replay left the recorded states (another build or task).
    """
    from robosuite.utils.transform_utils import quat2axisangle

    env = getattr(render_env, "unwrapped", render_env)
    raw_env = env.raw_env
    if episode.init_state >= 0:  # the env's own reset: same wait steps, same RNG state
        env.reset(options={"init_state": episode.init_state})
        raws = [env.raw_obs]
    elif episode.placement_seed is not None:  # same seed, same placement and fixtures
        env.reset(options={"placement_seed": episode.placement_seed})
        raws = [env.raw_obs]
    else:
        raw_env.reset()
        raws = [raw_env.set_init_state(episode.states[0])]
    for t, action in enumerate(episode.actions):
        state = np.asarray(raw_env.get_sim_state())
        gap = float(np.max(np.abs(state - episode.states[t])))
        if gap > REPLAY_TOLERANCE:
            raise DatasetError(
                f"replaying {env.env_id} from init state {episode.init_state}: step {t} is "
                f"{gap:.3g} away from the recorded state",
                fix="write the file with the same simulator build and task that recorded it",
            )
        if t + 1 < len(episode.actions):
            env.step(action)
            raws.append(env.raw_obs)
    out: dict[str, list[np.ndarray]] = {
        k: [] for k in ("ee_pos", "ee_ori", "ee_states", "gripper_states", "joint_states")
    }
    out["robot_states"] = []
    for cam in cameras:
        out[CAMERA_KEYS[cam]] = []
    for raw in raws:
        pos = np.asarray(raw["robot0_eef_pos"], dtype=np.float64)
        ori = np.asarray(quat2axisangle(np.asarray(raw["robot0_eef_quat"])), dtype=np.float64)
        out["ee_pos"].append(pos)
        out["ee_ori"].append(ori)
        out["ee_states"].append(np.concatenate([pos, ori]))
        out["gripper_states"].append(np.asarray(raw["robot0_gripper_qpos"], dtype=np.float64))
        out["joint_states"].append(np.asarray(raw["robot0_joint_pos"], dtype=np.float64))
        out["robot_states"].append(
            np.asarray(raw_env.env.get_robot_state_vector(raw), dtype=np.float64)
        )
        for cam in cameras:
            out[CAMERA_KEYS[cam]].append(np.asarray(raw[f"{CAMERAS[cam]}_image"], dtype=np.uint8))
    return {k: np.stack(v) for k, v in out.items()}


def write_demo_file(
    path: str | os.PathLike[str],
    task: Any,
    episodes: Sequence[RecordedEpisode],
    *,
    make_render_env: Callable[[Sequence[str], int], Any],
    cameras: Sequence[str] = ("agentview", "eye_in_hand"),
    image_size: int = 128,
    control_rate_hz: float = 20.0,
    on_episode: Callable[[int], None] | None = None,
) -> Path:
    """Write ``episodes`` as one LIBERO demonstration file, rendering their cameras.

    The file appears atomically (written beside ``path``, then renamed); an existing file
    is never overwritten.

    Args:
        path: The ``*_demo.hdf5`` file to create.
        task: The :class:`~sim.libero.tasks.LiberoTask` the episodes ran on.
        episodes: Recorded episodes (only these are written; filter failures before).
        make_render_env: ``(cameras, image_size) -> LiberoEnv`` of the same task with those
            cameras (closed here).
        cameras: Cameras to render (``agentview``, ``eye_in_hand``).
        image_size: Square image size (px); LIBERO's files use 128, OpenVLA's 256.
        control_rate_hz: Control rate the episodes ran at (Hz), recorded in ``env_args``.
        on_episode: Called with the index of each episode written (progress).

    Raises:
        ConfigError: an existing ``path``, an unknown camera, no episodes or a bad size.
    """
    path = Path(path)
    if path.exists():
        raise ConfigError(
            f"{path} exists; demonstrations are never overwritten",
            fix="pick another --out folder or move the file away",
        )
    unknown = [c for c in cameras if c not in CAMERA_KEYS]
    if unknown:
        raise ConfigError(
            f"cameras {unknown} are not recorded in LIBERO's layout (it has {list(CAMERA_KEYS)})",
            fix="pass --cameras agentview,eye_in_hand (or one of them)",
        )
    if not episodes:
        raise ConfigError("no episodes to write", fix="collect at least one successful episode")
    if not (isinstance(image_size, int) and 8 <= image_size <= 1024):
        raise ConfigError(
            f"image_size {image_size!r} px out of range",
            fix="pass an int in 8..1024 (LIBERO's files: 128; OpenVLA's: 256)",
        )
    bddl = Path(task.bddl_file())
    info = _problem_info(bddl)
    render_env = make_render_env(tuple(cameras), image_size)
    try:
        inner = getattr(render_env, "unwrapped", render_env).raw_env.env
        env_name = type(inner).__name__
        with atomic_path(path, replace=False) as tmp, h5py.File(tmp, "w") as f:
            grp = f.create_group("data")
            grp.attrs["env_name"] = env_name
            grp.attrs["problem_info"] = json.dumps(info)
            grp.attrs["macros_image_convention"] = "opengl"
            grp.attrs["bddl_file_name"] = str(bddl)
            grp.attrs["bddl_file_content"] = bddl.read_text()
            env_kwargs = {
                "robots": ["Panda"],
                "controller": "OSC_POSE",
                "control_freq": control_rate_hz,
                "camera_names": [CAMERAS[c] for c in cameras],
                "camera_heights": image_size,
                "camera_widths": image_size,
                "bddl_file_name": str(bddl),
            }
            grp.attrs["env_args"] = json.dumps(
                {
                    "type": 1,
                    "env_name": env_name,
                    "problem_name": info.get("problem_name", ""),
                    "bddl_file": str(bddl),
                    "env_kwargs": env_kwargs,
                }
            )
            grp.attrs["embodied_obs_alignment"] = OBS_ALIGNMENT
            grp.attrs["embodied_task"] = f"{task.suite}:{task.name}"
            grp.attrs["embodied_language"] = task.language
            total = 0
            for i, ep in enumerate(episodes):
                obs = render_episode(render_env, ep, cameras)
                n = len(ep.actions)
                demo = grp.create_group(f"demo_{i}")
                obs_grp = demo.create_group("obs")
                for key, value in obs.items():
                    if key == "robot_states":
                        continue
                    if value.dtype == np.uint8:
                        obs_grp.create_dataset(key, data=value, compression="gzip")
                    else:
                        obs_grp.create_dataset(key, data=value)
                executed = np.asarray(ep.actions, dtype=np.float64)
                if ep.labels is not None:  # DART: learn the clean action, replay the executed
                    demo.create_dataset("actions", data=np.asarray(ep.labels, dtype=np.float64))
                    demo.create_dataset("executed_actions", data=executed)
                else:
                    demo.create_dataset("actions", data=executed)
                demo.create_dataset("states", data=np.asarray(ep.states, dtype=np.float64))
                demo.create_dataset("robot_states", data=obs["robot_states"])
                flags = np.zeros(n, dtype=np.uint8)
                flags[-1] = 1
                demo.create_dataset("rewards", data=flags)
                demo.create_dataset("dones", data=flags)
                demo.attrs["num_samples"] = n
                demo.attrs["model_file"] = ep.model_xml
                demo.attrs["init_state"] = np.asarray(ep.states[0], dtype=np.float64)
                demo.attrs["embodied_init_state_index"] = ep.init_state
                if ep.placement_seed is not None:
                    demo.attrs["embodied_placement_seed"] = ep.placement_seed
                if "action_noise" in ep.meta:
                    demo.attrs["embodied_action_noise"] = json.dumps(ep.meta["action_noise"])
                total += n
                if on_episode is not None:
                    on_episode(i)
            grp.attrs["num_demos"] = len(episodes)
            grp.attrs["total"] = total
    finally:
        render_env.close()
    return path
