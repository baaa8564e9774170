"""The PDP as an ``embodied`` policy: Policy + Steerable (knob ``z``), save/load.

A checkpoint folder holds ``config.json`` (``"policy_type": "pdp"`` + the config),
``model.safetensors`` (EMA weights of the denoiser, the manifold, and the normalisation
statistics as ``normalizer.*``). No pickle anywhere.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save_file

from embodied.contracts import Env, Knob, KnobMixin, Policy
from embodied.errors import CheckpointError, CompatibilityError, ConfigError
from embodied.io import (
    atomic_path,
    build_from_file,
    load_safetensors_file,
    read_json_file,
    write_json,
)
from embodied.specs import Observation, image_key
from policies.diffusion.configuration_pdp import PDPConfig
from policies.diffusion.modeling_pdp import STAT_KEYS, PDPModel
from policies.diffusion.processor_pdp import OPENPI_KEYS, env_action, from_openpi
from policies.diffusion.rtc import RTCConfig, RTCGuide, prefix_weights

PRIOR_STREAM = 7919
"""First entropy word of the prior draws: episode ``s`` draws z from
``default_rng([PRIOR_STREAM, s])``, independent of which other episodes run."""
Z_SOURCES = ("knob", "prior")
POLICY_TYPE = "pdp"
FORMAT_VERSION = 1
WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"
RESAVE_FIX = "re-save the checkpoint with save_pretrained / `embodied train pdp`, or restore it"


def prior_z(seed: int, z_dim: int) -> np.ndarray:
    """Episode ``seed``'s draw of z from the prior N(0, I) (reproducible per episode)."""
    return np.random.default_rng([PRIOR_STREAM, int(seed)]).standard_normal(z_dim)


class PDPPolicy(KnobMixin, Policy):
    """Parameterized Diffusion Policy with knob ``z`` (standardised behaviour latent).

    ``z`` is clipped to ``[-z_bound, z_bound]`` per element by the knob bounds; the prior
    N(0, I) of the manifold maps onto the knob's centre. The plain diffusion-policy
    baseline (``z_dim == 0``) has no knobs.

    Args:
        model: The network (EMA weights for inference).
        noise_seed: Seed of the sampling noise, re-applied at every :meth:`reset`.
        z: ``"knob"`` (z stays where it is set, 0 by default) or ``"prior"`` (each seeded
            episode starts from its own draw :func:`prior_z`, the PDP's behaviour
            distribution; a controller may still set the knob during the episode).
            ``embodied eval --policy DIR --policy-arg z=prior``.

    Attributes:
        noise_per_episode: Mix the episode seed into the noise (:meth:`seed_episode`).
    """

    def __init__(
        self,
        model: PDPModel,
        noise_seed: int = 0,
        z: str = "knob",
    ) -> None:
        super().__init__()
        if z not in Z_SOURCES:
            raise ConfigError(
                f"PDP policy option z={z!r} is unknown",
                fix=f"use one of {Z_SOURCES} (e.g. --policy-arg z=prior)",
            )
        if z == "prior" and not model.config.uses_z:
            raise ConfigError(
                "PDP policy option z='prior' needs a PDP with a behaviour latent; this one "
                "has z_dim=0",
                fix="drop z=prior for a plain diffusion policy",
            )
        self.z_source = z
        model.normalizer.check()
        if model.obs_encoder is not None:
            model.obs_encoder.check()
        self.model = model.eval()
        self.config: PDPConfig = model.config
        cfg = self.config
        self.action_dim = cfg.action_dim
        # the trained value is the default; `embodied eval --execute-steps` sets another
        self.n_action_steps = cfg.n_action_steps
        self.chunk_length = int(cfg.horizon)
        self.image_keys = tuple(f"image.{c}" for c in cfg.vision.cameras)
        h, w = cfg.vision.image_shape
        self.image_size = (int(h), int(w)) if cfg.vision.cameras else None
        self._knobs: dict[str, Knob] = {}
        if cfg.uses_z:
            b = float(cfg.z_bound)
            self._knobs["z"] = Knob(
                "z",
                (-b,) * cfg.z_dim,
                (b,) * cfg.z_dim,
                (0.0,) * cfg.z_dim,
                description="behaviour latent (standardised; prior N(0, I))",
            )
        self._history: deque[np.ndarray] = deque(maxlen=cfg.n_obs_steps)
        self._frames: dict[str, deque[np.ndarray]] = {
            c: deque(maxlen=cfg.n_obs_steps) for c in cfg.vision.cameras
        }
        self._text_encoder: Any = None  # the frozen sentence encoder, loaded on first use
        self.noise_seed = int(noise_seed)
        self.noise_per_episode = True
        self._generator = torch.Generator().manual_seed(self.noise_seed)
        self._z_cache: tuple[bytes, torch.Tensor] | None = None
        self.rtc = RTCConfig()
        """Real-time chunking settings of :meth:`guided_chunk`."""

    # ---- Policy contract ------------------------------------------------------------------
    def reset(self) -> None:
        """Clear queue and observation history; re-seed the sampling noise."""
        super().reset()
        self._history.clear()
        for frames in self._frames.values():
            frames.clear()
        self._generator.manual_seed(self.noise_seed)

    def seed_episode(self, seed: int) -> None:
        """Draw this episode's sampling noise from ``(noise_seed, seed)``.

        :func:`embodied.loop.rollout` calls it with the reset seed, so ``embodied eval`` and
        the experiments sample the same noise for the same episode; ``noise_seed`` selects
        another noise stream for all episodes. With ``noise_per_episode = False`` every
        episode draws the noise of ``noise_seed`` alone (best-of-N over the initial noise:
        the noise found best on search episodes is the noise used on new ones).
        """
        if self.z_source == "prior":
            b = float(self.config.z_bound)
            self.set_knob("z", np.clip(prior_z(seed, self.config.z_dim), -b, b))
        if not self.noise_per_episode:  # the same noise in every episode: a searched stream
            self._generator.manual_seed(self.noise_seed)
            return
        state = np.random.SeedSequence([self.noise_seed % 2**64, int(seed) % 2**64]).generate_state(
            2
        )
        self._generator.manual_seed(int(state[0]) << 32 | int(state[1]))

    def select_action(self, obs: Observation) -> np.ndarray:
        """Record ``obs`` in the history, then pop (or plan) the next action.

        With ``action_space == "position_targets"`` the popped row is a position target and
        the action is the velocity reaching it from the state measured now.
        """
        self._push(obs)
        row = super().select_action(obs)
        return env_action(row, self._history[-1], self.config)

    # ---- serving --------------------------------------------------------------------------
    foreign_observation_keys = OPENPI_KEYS

    @property
    def history_steps(self) -> int:  # type: ignore[override]
        """Observations the denoiser conditions on (``n_obs_steps``)."""
        return int(self.config.n_obs_steps)

    def observe(self, obs: Observation) -> None:
        """Record ``obs`` in the observation history (as :meth:`select_action` does)."""
        self._push(obs)

    def fresh_chunk(self, obs: Observation) -> np.ndarray:
        """Record ``obs`` and sample a fresh chunk of env actions (the horizon's rows).

        Raises:
            CompatibilityError: a ``position_targets`` policy, whose rows become actions only
                with the state measured when each executes (served chunks would be stale).
        """
        self._check_chunk_actions()
        self._push(obs)
        return self.predict_action_chunk(obs)

    def _check_chunk_actions(self) -> None:
        """Refuse chunks that are not env actions (``position_targets`` policies)."""
        if self.config.action_space != "native":
            raise CompatibilityError(
                f"this PDP generates {self.config.action_space!r}, converted to actions with "
                "the state measured at each step, so its chunks cannot be served or run ahead",
                fix="serve a policy trained with action_space='native' (the default), or run "
                "it in process",
            )

    def _fork_state(self, twin: Policy) -> None:
        assert isinstance(twin, PDPPolicy)
        twin._history = deque(self._history, maxlen=self.config.n_obs_steps)
        twin._frames = {
            c: deque(f, maxlen=self.config.n_obs_steps) for c, f in self._frames.items()
        }
        twin._generator = torch.Generator().manual_seed(self.noise_seed)
        twin._generator.set_state(self._generator.get_state())
        twin._z_cache = None

    def adapt_observation(self, raw: Mapping[str, Any]) -> Observation:
        """Our keys as they are; openpi's LIBERO client keys through the processor
        (:func:`~policies.diffusion.processor_pdp.from_openpi`)."""
        if any(k in raw for k in OPENPI_KEYS):
            return from_openpi(raw, self.config)
        return super().adapt_observation(raw)

    def _state_vector(self, obs: Observation) -> np.ndarray:
        """``obs['state']`` as a finite float32 vector; what a served request sends is only
        known here (a missing key, text or NaN must be refused, not crash the policy)."""
        fix = (
            f"send 'state' as {self.config.state_dim} finite numbers "
            f"({list(self.config.state_names)})"
        )
        if "state" not in obs:
            raise CompatibilityError(
                f"observation has no 'state' (keys: {sorted(obs)[:8]})", fix=fix
            )
        raw = obs["state"]
        try:
            state = np.asarray(raw, dtype=np.float32).reshape(-1)
        except (TypeError, ValueError, OverflowError) as exc:
            raise CompatibilityError(
                f"observation 'state' ({type(raw).__name__}) is not a numeric vector", fix=fix
            ) from exc
        if not np.isfinite(state).all():
            raise CompatibilityError("observation 'state' holds NaN or infinity", fix=fix)
        return state

    def _push(self, obs: Observation) -> None:
        state = self._state_vector(obs)
        if state.shape[0] != self.config.state_dim:
            raise CompatibilityError(
                f"observation 'state' has {state.shape[0]} dims, PDP expects "
                f"{self.config.state_dim} ({list(self.config.state_names)})",
                fix="run the policy on the env it was trained on",
            )
        fresh = not self._history
        for cam, frames in self._frames.items():
            img = obs.get(image_key(cam))
            expected = (*self.config.vision.image_shape, 3)
            if img is None or np.shape(img) != expected:
                raise CompatibilityError(
                    f"observation {image_key(cam)!r} is "
                    f"{'missing' if img is None else np.shape(img)}; the policy was trained on "
                    f"{expected} frames of camera {cam!r}",
                    fix="run the env with that camera at the training image size "
                    "(e.g. --env-arg image_size=...)",
                )
            try:
                frame = np.asarray(img, dtype=np.uint8)
            except (TypeError, ValueError, OverflowError) as exc:
                raise CompatibilityError(
                    f"observation {image_key(cam)!r} ({np.asarray(img).dtype}) is not an "
                    "image of bytes",
                    fix="send uint8 RGB frames",
                ) from exc
            for _ in range(self.config.n_obs_steps - 1 if fresh else 0):
                frames.append(frame)
            frames.append(frame)
        if fresh:
            for _ in range(self.config.n_obs_steps - 1):
                self._history.append(state)
        self._history.append(state)

    def _z_tensor(self) -> torch.Tensor | None:
        if not self.config.uses_z:
            return None
        value = self.get_knob("z")
        key = value.tobytes()
        if self._z_cache is None or self._z_cache[0] != key:
            self._z_cache = (key, torch.as_tensor(value, dtype=torch.float32)[None])
        return self._z_cache[1]

    def predict_action_chunk(self, obs: Observation) -> np.ndarray:
        """Sample a (horizon, action_dim) chunk for the current history (and knob z)."""
        return self._sample(obs)

    supports_rtc = True

    def guided_chunk(self, obs: Observation, prefix: np.ndarray, delay: int) -> np.ndarray:
        """Record ``obs`` and sample a chunk inpainted toward ``prefix`` (real-time chunking,
        :mod:`policies.diffusion.rtc`; settings in :attr:`rtc`)."""
        self._check_chunk_actions()
        self._push(obs)
        horizon, dim = self.config.horizon, self.config.action_dim
        rows = np.asarray(prefix, dtype=np.float32).reshape(-1, dim)[:horizon]
        target = torch.zeros((1, horizon, dim))
        target[0, : len(rows)] = self.model.normalizer.norm_action(torch.from_numpy(rows))
        weights = prefix_weights(int(delay), len(rows), horizon, self.rtc.schedule)
        return self._sample(
            obs, RTCGuide(target, weights, self.rtc.max_guidance_weight, self.rtc.jacobian)
        )

    def _sample(self, obs: Observation, guide: RTCGuide | None = None) -> np.ndarray:
        if not self._history:
            self._push(obs)
        hist = torch.from_numpy(np.concatenate(self._history))[None]
        images = None
        if self._frames:  # (1, n_cams, n_obs_steps, H, W, 3) uint8
            images = torch.from_numpy(np.stack([np.stack(f) for f in self._frames.values()])[None])
        # guidance differentiates the denoiser, which inference mode cannot (no_grad can)
        with torch.inference_mode() if guide is None else torch.no_grad():
            model = self.model
            obs_n = model.encode_obs(
                hist.view(1, -1, self.config.state_dim), images, self._text(obs)
            )
            chunk = model.sample(obs_n, self._z_tensor(), generator=self._generator, guide=guide)
            actions = model.normalizer.unnorm_action(chunk)[0]
        return actions.numpy().astype(np.float64)

    def _text(self, obs: Observation) -> torch.Tensor | None:
        """(1, text_dim) embedding of the observation's instruction (cached per string)."""
        vision = self.config.vision
        if not vision.text_model:
            return None
        text = str(obs.get("instruction", "")).strip()
        if not text:
            raise CompatibilityError(
                "the policy is language-conditioned but the observation has no 'instruction'",
                fix="run it on an env that gives instructions (or pass one in the observation)",
            )
        if self._text_encoder is None:
            from embodied.text import TextEncoder

            self._text_encoder = TextEncoder(vision.text_model)
        return self._text_encoder.encode([text])  # type: ignore[no-any-return]

    def check_compatible(self, env: Env) -> None:
        """Also refuse envs whose state size or cameras differ from the training data."""
        cams = env.observation_spec.cameras
        for cam in self.config.vision.cameras:
            spec = cams.get(cam)
            shape = None if spec is None else (spec.height, spec.width)
            if shape != self.config.vision.image_shape:
                # the size option is the env family's: LIBERO renders at render_size
                size_key = "render_size" if env.env_id.startswith("libero:") else "image_size"
                raise CompatibilityError(
                    f"the policy sees camera {cam!r} at {self.config.vision.image_shape} px but "
                    f"env {env.env_id!r} gives {'no such camera' if shape is None else shape} "
                    f"(cameras: {sorted(cams)})",
                    fix="turn the env's cameras on at the training image size (e.g. --cameras "
                    f"{','.join(self.config.vision.cameras)} --env-arg "
                    f"{size_key}={self.config.vision.image_shape[0]})",
                )
        super().check_compatible(env)  # after ours: ours names the env options to set
        if env.observation_spec.state.dim != self.config.state_dim:
            raise CompatibilityError(
                f"PDP was trained on {self.config.state_dim}-dim states but env "
                f"{env.env_id!r} has {env.observation_spec.state.dim} "
                f"({env.observation_spec.state.names})",
                fix="train the policy on data from this env",
            )

    # ---- persistence ----------------------------------------------------------------------
    def save_pretrained(self, path: str | os.PathLike[str]) -> Path:
        """Write ``config.json`` and ``model.safetensors`` (atomically) into ``path``."""
        return save_model(self.model, path)

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike[str],
        noise_seed: int = 0,
        z: str = "knob",
        device: str = "cpu",
    ) -> PDPPolicy:
        """Load from a local folder or a Hugging Face hub id (``owner/name``).

        ``device``: where the policy runs; inference here runs on the CPU (the chunk takes
        milliseconds, less than moving a batch-1 observation to a GPU), so only ``"cpu"``.
        """
        if device != "cpu":
            raise ConfigError(
                f"PDP policies run on the CPU, got device={device!r}",
                fix="drop device (or pass device=cpu)",
            )
        return cls(load_model(path), noise_seed=int(noise_seed), z=z)


def save_model(model: PDPModel, path: str | os.PathLike[str]) -> Path:
    """Save ``model`` as a PDP checkpoint folder; returns the folder."""
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    model.normalizer.check()
    state = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    # config first: weights then never stand without their config.json, even when a kill
    # lands between the two writes (a training run rewrites the same config at each save)
    write_json(
        out / CONFIG_NAME,
        {"policy_type": POLICY_TYPE, "format_version": FORMAT_VERSION, **model.config.to_dict()},
    )
    with atomic_path(out / WEIGHTS_NAME) as tmp:
        save_file(state, str(tmp), metadata={"policy_type": POLICY_TYPE})
    return out


def resolve_checkpoint(path: str | os.PathLike[str]) -> Path:
    """A local checkpoint folder, downloading ``owner/name`` hub ids if needed."""
    p = Path(path)
    if p.is_dir():
        return p
    spec = str(path)
    if spec.count("/") == 1 and not p.exists() and not spec.startswith((".", "/")):
        try:
            from huggingface_hub import snapshot_download

            return Path(snapshot_download(spec, allow_patterns=[CONFIG_NAME, WEIGHTS_NAME]))
        except Exception as exc:  # network, auth, offline mode
            raise CheckpointError(
                f"cannot fetch PDP checkpoint {spec!r} from the hub: {exc}",
                fix="pass a local folder written by `embodied train pdp`",
            ) from exc
    raise CheckpointError(
        f"PDP checkpoint folder {spec!r} does not exist",
        fix="pass a folder written by `embodied train pdp --out DIR`",
    )


def load_model(path: str | os.PathLike[str]) -> PDPModel:
    """Load a :class:`PDPModel` from a checkpoint folder, checking every key and statistic."""
    folder = resolve_checkpoint(path)
    cfg_file, w_file = folder / CONFIG_NAME, folder / WEIGHTS_NAME
    for f in (cfg_file, w_file):
        if not f.exists():
            raise CheckpointError(
                f"PDP checkpoint {str(folder)!r} lacks {f.name}",
                fix="re-save it with save_pretrained / `embodied train pdp`",
            )
    data = read_json_file(cfg_file, what="PDP config", fix=RESAVE_FIX)
    if data.get("policy_type") != POLICY_TYPE:
        raise CheckpointError(
            f"{cfg_file} has policy_type {data.get('policy_type')!r}, not {POLICY_TYPE!r}",
            fix="load it with its own policy type",
        )
    config = build_from_file(
        cfg_file, lambda: PDPConfig.from_dict(data), what="PDP config", fix=RESAVE_FIX
    )
    model = PDPModel(config)
    state = load_safetensors_file(w_file, what="PDP weights", fix=RESAVE_FIX)
    expected = model.state_dict()
    missing_stats = [f"normalizer.{k}" for k in STAT_KEYS if f"normalizer.{k}" not in state]
    if missing_stats:
        raise CheckpointError(
            f"{w_file} lacks normalisation statistics {missing_stats}",
            fix="the checkpoint is incomplete; re-train or re-save it with its statistics",
        )
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{w_file} does not match config: missing {missing[:5]}, unexpected {unexpected[:5]}",
            fix="config.json and model.safetensors come from different models; re-save both",
        )
    for key, value in state.items():
        if value.shape != expected[key].shape:
            raise CheckpointError(
                f"{w_file}: {key!r} has shape {tuple(value.shape)}, config implies "
                f"{tuple(expected[key].shape)}",
                fix="config.json and model.safetensors come from different models",
            )
    model.load_state_dict(state)
    model.normalizer.check()
    if model.obs_encoder is not None:
        model.obs_encoder.check()
    return model.eval()
