"""Data processing for PDP: demonstrations -> statistics, training windows, end-effector paths."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from embodied.datasets import EpisodeData, open_dataset
from embodied.errors import DatasetError
from embodied.specs import image_key
from policies.diffusion.configuration_pdp import PDPConfig
from policies.diffusion.modeling_manifold import resample


@dataclass
class Demonstrations:
    """Whole demonstrations as arrays (what the manifold and the policy train on).

    Attributes:
        states: Per demonstration, (T_i, state_dim) float64 states.
        actions: Per demonstration, (T_i, action_dim) float64 actions.
        labels: Per demonstration, a label such as the route class ("" when unknown).
        env_args: Env description from the dataset (env_id, specs).
        images: Camera name -> per demonstration, (T_i, H, W, 3) uint8 frames (visuomotor
            policies; empty for state-only ones).
        instructions: Per demonstration, the task instruction (empty when not loaded).
    """

    states: list[np.ndarray]
    actions: list[np.ndarray]
    labels: list[str] = field(default_factory=list)
    env_args: dict[str, Any] = field(default_factory=dict)
    images: dict[str, list[np.ndarray]] = field(default_factory=dict)
    instructions: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if len(self.states) != len(self.actions):
            raise DatasetError(
                f"{len(self.states)} state sequences but {len(self.actions)} action sequences",
                fix="give one (states, actions) pair per demonstration",
            )
        if not self.states:
            raise DatasetError(
                "no demonstrations", fix="collect expert demonstrations first (`embodied collect`)"
            )
        if not self.labels:
            self.labels = [""] * len(self.states)
        sd, ad = self.states[0].shape[1], self.actions[0].shape[1]
        for i, (s, a) in enumerate(zip(self.states, self.actions, strict=True)):
            if s.ndim != 2 or a.ndim != 2 or s.shape[0] != a.shape[0] or s.shape[0] < 2:
                raise DatasetError(
                    f"demonstration {i} has states {s.shape} and actions {a.shape}",
                    fix="every demonstration needs >= 2 steps with one state per action",
                )
            if s.shape[1] != sd or a.shape[1] != ad:
                raise DatasetError(
                    f"demonstration {i} has state/action dims {s.shape[1]}/{a.shape[1]}, "
                    f"demonstration 0 has {sd}/{ad}",
                    fix="train on demonstrations of one env",
                )
        for cam, frames in self.images.items():
            shapes = {f.shape[1:] for f in frames}
            if len(frames) != len(self.states) or len(shapes) != 1:
                raise DatasetError(
                    f"camera {cam!r} has {len(frames)} frame sequences of shapes {sorted(shapes)} "
                    f"for {len(self.states)} demonstrations",
                    fix="give one (T_i, H, W, 3) uint8 sequence per demonstration, one size",
                )
            for i, (f, st) in enumerate(zip(frames, self.states, strict=True)):
                if f.shape[0] != st.shape[0] or f.ndim != 4 or f.shape[3] != 3:
                    raise DatasetError(
                        f"demonstration {i}: camera {cam!r} frames {f.shape} do not match "
                        f"its {st.shape[0]} states",
                        fix="record one RGB frame per step",
                    )
        if self.instructions and len(self.instructions) != len(self.states):
            raise DatasetError(
                f"{len(self.instructions)} instructions for {len(self.states)} demonstrations",
                fix="give one instruction per demonstration",
            )

    def __len__(self) -> int:
        return len(self.states)

    @property
    def state_dim(self) -> int:
        """State size."""
        return int(self.states[0].shape[1])

    @property
    def action_dim(self) -> int:
        """Action size."""
        return int(self.actions[0].shape[1])

    def stats(self) -> dict[str, np.ndarray]:
        """Min/max of states and actions over all demonstrations."""
        s = np.concatenate(self.states)
        a = np.concatenate(self.actions)
        return {
            "state_min": s.min(0),
            "state_max": s.max(0),
            "action_min": a.min(0),
            "action_max": a.max(0),
        }

    def subset(self, idx: Sequence[int]) -> Demonstrations:
        """The demonstrations at ``idx``."""
        return Demonstrations(
            [self.states[i] for i in idx],
            [self.actions[i] for i in idx],
            [self.labels[i] for i in idx],
            dict(self.env_args),
            {cam: [frames[i] for i in idx] for cam, frames in self.images.items()},
            [self.instructions[i] for i in idx] if self.instructions else [],
        )

    def image_stats(self, cameras: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Per-camera, per-channel mean and std (in [0, 1]) of the frames: (n_cams, 3) each."""
        mean, std = [], []
        for cam in cameras:
            total = np.zeros(3)
            sq = np.zeros(3)
            count = 0
            for f in self.images[cam]:  # per demonstration: bounded memory, float64 sums
                x = f.reshape(-1, 3).astype(np.float64) / 255.0
                total += x.sum(0)
                sq += (x * x).sum(0)
                count += x.shape[0]
            m = total / count
            mean.append(m)
            std.append(np.sqrt(np.maximum(sq / count - m * m, 0.0)))
        return np.array(mean), np.array(std)


def load_demonstrations(
    path: str | os.PathLike[str] | Sequence[EpisodeData],
    label_key: str = "route",
    successful_only: bool = True,
    label_fn: Callable[[np.ndarray], str] | None = None,
    cameras: Sequence[str] = (),
) -> Demonstrations:
    """Read demonstrations from a dataset: ``embodied collect`` shards, a robomimic HDF5 file,
    a LeRobotDataset v3 folder (:func:`embodied.datasets.open_dataset`), or an opened dataset
    (e.g. ``sim.libero.load_demonstrations(file)`` for LIBERO's demonstration files, whose keys
    it renames to ours).

    Args:
        path: Dataset folder or file, or a sequence of episodes.
        label_key: Demonstration attribute (or ``meta`` entry) holding the behaviour label.
        successful_only: Skip demonstrations whose ``success`` attribute is False.
        label_fn: Labels the demonstrations from their ``(T, state_dim)`` states when none records a
            label (e.g. ``sim.mujoco.classify_route`` for reach_around); labels only feed
            diagnostics (mode coverage), never training.
        cameras: Cameras whose frames (``image.<camera>``) to load, for visuomotor policies.
    """
    keys = ["state", *(image_key(c) for c in cameras)]
    ds = open_dataset(path, obs_keys=keys) if isinstance(path, str | os.PathLike) else path
    where = str(getattr(ds, "path", path))
    states, actions, labels, instructions = [], [], [], []
    images: dict[str, list[np.ndarray]] = {c: [] for c in cameras}
    for ep in ds:
        missing = [k for k in keys if k not in ep.obs]
        if missing:
            raise DatasetError(
                f"{ep.source} lacks observation(s) {missing} (keys: {sorted(ep.obs)})",
                fix="collect with state observations (and `--camera` for the cameras the policy "
                "sees), or train on the cameras the dataset has",
            )
        if successful_only and not _success(ep):
            continue
        s, a = _episode_arrays(ep)
        states.append(s)
        actions.append(a)
        for c in cameras:
            images[c].append(_frames(ep, c, len(s)))
        meta = ep.attrs.get("meta") if isinstance(ep.attrs.get("meta"), dict) else {}
        labels.append(_text(ep.attrs.get(label_key, meta.get(label_key, ""))))  # type: ignore[union-attr]
        instructions.append(_text(ep.attrs.get("instruction", "")))
    if not states:
        raise DatasetError(
            f"dataset {where!r} has no successful demonstrations",
            fix="collect successful expert demonstrations",
        )
    if not any(labels) and label_fn is not None:
        labels = [str(label_fn(s)) for s in states]
    env_args = dict(getattr(ds, "env_args", {}) or {})
    try:
        return Demonstrations(states, actions, labels, env_args, images, instructions)
    except DatasetError as exc:  # e.g. episodes of two envs: say which dataset
        raise exc.in_file(where, "dataset") from exc


_REFRESH = "re-collect the episode (`embodied collect`), or delete it from the dataset"


def _success(ep: EpisodeData) -> bool:
    """The episode's ``success`` attribute as a flag (no attribute: a success).

    Raises:
        DatasetError: the attribute holds several values (a damaged or foreign file).
    """
    value = ep.attrs.get("success")
    if value is None:
        return True
    flag = np.asarray(value)
    if flag.size != 1 or flag.dtype == object:  # bool() of those raises or means nothing
        raise DatasetError(
            f"{ep.source}: attribute 'success' is {value!r}, not one flag", fix=_REFRESH
        )
    return bool(flag.item())


def _text(value: Any) -> str:
    """An attribute as text; a damaged byte string decodes with replacement characters."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _episode_arrays(ep: EpisodeData) -> tuple[np.ndarray, np.ndarray]:
    """The episode's (T, state_dim) states and (T, action_dim) actions as float64.

    Checked here, per episode, so that a bad one is named by its file (``ep.source``): a
    NaN or infinite value would turn every normalisation statistic and the loss into NaN.

    Raises:
        DatasetError: non-numeric or non-finite values, or shapes that do not pair up.
    """
    out = []
    for what, value in (("observation 'state'", ep.obs["state"]), ("actions", ep.actions)):
        try:
            with np.errstate(invalid="ignore"):  # a value float64 cannot hold is reported below
                arr = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise DatasetError(f"{ep.source}: {what} is not numeric ({exc})", fix=_REFRESH) from exc
        if arr.ndim != 2:
            raise DatasetError(
                f"{ep.source}: {what} has shape {arr.shape}, not (steps, dims)", fix=_REFRESH
            )
        if not np.isfinite(arr).all():
            raise DatasetError(f"{ep.source}: {what} holds NaN or infinite values", fix=_REFRESH)
        out.append(arr)
    s, a = out
    if s.shape[0] != a.shape[0] or s.shape[0] < 2:
        raise DatasetError(
            f"{ep.source}: {s.shape[0]} states for {a.shape[0]} actions",
            fix="every demonstration needs >= 2 steps with one state per action",
        )
    return s, a


def _frames(ep: EpisodeData, camera: str, steps: int) -> np.ndarray:
    """The episode's (T, H, W, 3) uint8 frames of ``camera``.

    Raises:
        DatasetError: frames of another dtype or shape (casting would make garbage pixels).
    """
    frames = np.asarray(ep.obs[image_key(camera)])
    ok = frames.dtype == np.uint8 and frames.ndim == 4
    if not ok or frames.shape[0] != steps or frames.shape[3] != 3:
        raise DatasetError(
            f"{ep.source}: camera {camera!r} frames are {frames.dtype} {frames.shape}, not "
            f"{steps} RGB uint8 frames (steps, height, width, 3)",
            fix=_REFRESH,
        )
    return frames


def obs_window(states: np.ndarray, t: int, n_obs_steps: int) -> np.ndarray:
    """The last ``n_obs_steps`` states up to step ``t``, padding the start with state 0."""
    idx = np.clip(np.arange(t - n_obs_steps + 1, t + 1), 0, None)
    return states[idx]


def make_windows(
    demonstrations: Demonstrations, n_obs_steps: int, horizon: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Training windows: observation history, action chunk starting now, demonstration index.

    Chunks running past a demonstration's end are padded with its last action.

    Returns:
        obs (N, n_obs_steps, state_dim), chunks (N, horizon, action_dim), demonstration_idx (N,).
    """
    obs, chunks, idx = [], [], []
    for d, (s, a) in enumerate(zip(demonstrations.states, demonstrations.actions, strict=True)):
        n = s.shape[0]
        for t in range(n):
            obs.append(obs_window(s, t, n_obs_steps))
            cidx = np.clip(np.arange(t, t + horizon), None, n - 1)
            chunks.append(a[cidx])
            idx.append(d)
    return np.stack(obs), np.stack(chunks), np.asarray(idx)


def hold_pad(demonstrations: Demonstrations, length: int) -> Demonstrations:
    """Demonstrations cut or padded to ``length`` steps: the last state is held, actions are 0.

    The reference code keeps only demonstrations of exactly its horizon's length; the scripted
    experts here vary their speed, so shorter demonstrations are padded with a zero action (the
    agent holds still, where an episode ending in success would already have stopped), which
    keeps each demonstration's duration in the encoder's input.
    """
    states, actions = [], []
    for s, a in zip(demonstrations.states, demonstrations.actions, strict=True):
        pad = max(0, length - len(s))
        states.append(np.concatenate((s[:length], np.repeat(s[-1:], pad, axis=0))))
        actions.append(np.concatenate((a[:length], np.zeros((pad, a.shape[1])))))
    return Demonstrations(
        states, actions, list(demonstrations.labels), dict(demonstrations.env_args)
    )


def model_actions(states: np.ndarray, actions: np.ndarray, config: PDPConfig) -> np.ndarray:
    """Env actions (T, action_dim) -> what the denoiser generates (``config.action_space``).

    ``position_targets``: ``s_t[path_dims] + a_t * control_dt``, the position each velocity
    command aims at one control step later (inverted by :func:`env_action`).
    """
    if config.action_space == "native":
        return np.asarray(actions)
    dims = list(config.path_dims or ())
    return np.asarray(states)[:, dims] + np.asarray(actions) * config.control_dt


def env_action(target: np.ndarray, state: np.ndarray, config: PDPConfig) -> np.ndarray:
    """A generated row -> the env action, from the state measured now.

    ``position_targets``: the velocity ``(target - s[path_dims]) / control_dt`` (the env or
    the safety filter bounds it); ``native``: unchanged.
    """
    if config.action_space == "native":
        return target
    return (target - np.asarray(state)[list(config.path_dims or ())]) / config.control_dt


def to_model_space(demonstrations: Demonstrations, config: PDPConfig) -> Demonstrations:
    """Demonstrations with their actions replaced by :func:`model_actions`."""
    if config.action_space == "native":
        return demonstrations
    return Demonstrations(
        list(demonstrations.states),
        [
            model_actions(s, a, config)
            for s, a in zip(demonstrations.states, demonstrations.actions, strict=True)
        ],
        list(demonstrations.labels),
        dict(demonstrations.env_args),
        demonstrations.images,
        list(demonstrations.instructions),
    )


def policy_windows(
    demonstrations: Demonstrations, config: PDPConfig
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The denoiser's training windows for ``config``'s variant, actions in model space.

    ``reference``: one window per demonstration, its first state and its whole action sequence
    (:func:`hold_pad` to the horizon), as the reference's ``build_z_dataset``. ``receding``:
    every step's observation history and the chunk starting there (:func:`make_windows`).

    Returns:
        obs (N, n_obs_steps, state_dim), chunks (N, horizon, action_dim), demonstration_idx (N,).
    """
    if not config.first_window_only:
        return make_windows(
            to_model_space(demonstrations, config), config.n_obs_steps, config.horizon
        )
    padded = to_model_space(hold_pad(demonstrations, config.horizon), config)
    obs = np.stack([obs_window(s, 0, config.n_obs_steps) for s in padded.states])
    return obs, np.stack(padded.actions), np.arange(len(padded))


def window_frames(demonstrations: Demonstrations, config: PDPConfig) -> np.ndarray:
    """(N, n_obs_steps) indices into the demonstrations' concatenated frames, one row per
    window of :func:`policy_windows` (same order, same start padding as :func:`obs_window`)."""
    starts = np.concatenate(([0], np.cumsum([len(s) for s in demonstrations.states])[:-1]))
    if config.first_window_only:
        return np.repeat(starts[:, None], config.n_obs_steps, axis=1)
    rows = []
    for start, s in zip(starts, demonstrations.states, strict=True):
        t = np.arange(len(s))[:, None]
        rows.append(start + np.clip(t + np.arange(1 - config.n_obs_steps, 1), 0, None))
    return np.concatenate(rows)


def ee_paths(demonstrations: Demonstrations, path_dims: Sequence[int], n_points: int) -> np.ndarray:
    """End-effector paths (N, n_points, len(path_dims)) relative to their start, resampled.

    Paths start at the origin (like the encoder's input, so L_geo compares path shapes,
    not start positions) and share one scale that maps them into ~[-1, 1].
    """
    dims = list(path_dims)
    paths = np.stack([resample(s[:, dims], n_points) for s in demonstrations.states])
    paths = paths - paths[:, :1]
    lo = paths.reshape(-1, len(dims)).min(0)
    hi = paths.reshape(-1, len(dims)).max(0)
    half = np.maximum((hi - lo).max() / 2.0, 1e-6)  # one scale for all dims keeps geometry
    return (paths - (hi + lo) / 2.0) / half


OPENPI_LIBERO_IMAGES = {"observation/image": "agentview", "observation/wrist_image": "eye_in_hand"}
"""openpi's LIBERO client keys -> the LIBERO camera each holds (``examples/libero/main.py``)."""

OPENPI_KEYS = (*OPENPI_LIBERO_IMAGES, "observation/state", "prompt")
"""Every observation key openpi's LIBERO client sends."""


def from_openpi(raw: Mapping[str, Any], config: PDPConfig) -> dict[str, Any]:
    """The policy's observation from what openpi's LIBERO client sends.

    openpi's client (``examples/libero/main.py``) rotates LIBERO's frames by 180 degrees and
    resizes them with padding to 224 px (``image_tools.resize_with_pad``); its
    ``observation/state`` is LIBERO's eef position, axis-angle and two gripper joints, our
    LIBERO env's ``state`` layout. This undoes the rotation (back to LIBERO's own row order,
    what a policy trained on LIBERO renders saw) and resizes to the training image size
    (bilinear, antialiased). What stays different from rendering at the training size: the
    frame is resampled from the client's 256 px render (padding-free for LIBERO's square
    frames), where ``embodied eval`` renders at the training size directly.

    Args:
        raw: The request, holding some of :data:`OPENPI_KEYS` (others pass through).
        config: The policy's configuration (cameras, image size, state size).

    Raises:
        CompatibilityError: a key the policy needs is missing, or a value of the wrong shape.
    """
    from PIL import Image

    from embodied.errors import CompatibilityError

    obs = {k: v for k, v in raw.items() if k not in OPENPI_KEYS}
    cameras = list(config.vision.cameras)
    for position, (key, camera) in enumerate(OPENPI_LIBERO_IMAGES.items()):
        if key not in raw:
            continue
        target = (
            camera
            if camera in cameras
            else (cameras[position] if position < len(cameras) else None)
        )
        if target is None:
            continue  # a camera this policy does not read
        img = np.asarray(raw[key])
        if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
            raise CompatibilityError(
                f"{key!r} is a {img.dtype} array of shape {img.shape}; expected uint8 (H, W, 3)",
                fix="send frames as openpi's client does (image_tools.convert_to_uint8)",
            )
        h, w = (int(n) for n in config.vision.image_shape)
        img = np.ascontiguousarray(img[::-1, ::-1])  # undo the client's 180-degree rotation
        if img.shape[:2] != (h, w):
            img = np.asarray(Image.fromarray(img).resize((w, h), Image.Resampling.BILINEAR))
        obs[image_key(target)] = img
    if "observation/state" in raw:
        obs["state"] = np.asarray(raw["observation/state"], dtype=np.float32).reshape(-1)
    if "prompt" in raw:
        obs["instruction"] = str(raw["prompt"])
    missing = [image_key(c) for c in cameras if image_key(c) not in obs]
    if "state" not in obs:
        missing.append("state")
    if missing:
        raise CompatibilityError(
            f"the request lacks {missing} (keys sent: {sorted(raw)})",
            fix="send observation/image, observation/wrist_image, observation/state and prompt "
            "as openpi's LIBERO client does, or the project's own keys",
        )
    return obs
