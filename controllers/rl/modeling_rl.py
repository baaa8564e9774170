"""The RL steering controller: a small tanh MLP actor run in numpy.

Weights are stored as ``model.safetensors`` plus ``config.json`` (never pickle). The actor is
the deterministic part of a stable-baselines3 PPO ``MlpPolicy`` (``mlp_extractor.policy_net``
followed by ``action_net``), exported by :func:`actor_state_from_sb3` after training.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from controllers.rl.configuration_rl import OBS_NAMES, ObservationBuilder, RLControllerConfig
from embodied.errors import CheckpointError, ConfigError
from embodied.io import (
    atomic_path,
    build_from_file,
    load_safetensors_file,
    read_json_file,
    write_json,
)

WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"
CONTROLLER_TYPE = "rl"
RESAVE_FIX = "re-save the controller with RLController.save_pretrained (or retrain it)"


class MLPActor:
    """``a = W_out tanh(... tanh(W_1 x + b_1) ...) + b_out`` in float32 numpy.

    Args:
        state: Tensors ``hidden.{i}.weight`` (out, in), ``hidden.{i}.bias`` and
            ``out.weight`` (1, last), ``out.bias``.
        n_obs: Observation entries the actor reads (``RLControllerConfig.obs_names()``).
    """

    def __init__(self, state: dict[str, np.ndarray], n_obs: int = len(OBS_NAMES)) -> None:
        n_hidden = len([k for k in state if k.startswith("hidden.") and k.endswith(".weight")])
        expected = {f"hidden.{i}.{p}" for i in range(n_hidden) for p in ("weight", "bias")}
        expected |= {"out.weight", "out.bias"}
        if set(state) != expected:
            raise CheckpointError(
                f"RL actor weights have keys {sorted(state)}; expected {sorted(expected)}",
                fix="save the controller with RLController.save_pretrained",
            )
        self.layers = [
            (
                np.ascontiguousarray(state[f"hidden.{i}.weight"], dtype=np.float32),
                np.ascontiguousarray(state[f"hidden.{i}.bias"], dtype=np.float32),
            )
            for i in range(n_hidden)
        ]
        self.out = (
            np.ascontiguousarray(state["out.weight"], dtype=np.float32),
            np.ascontiguousarray(state["out.bias"], dtype=np.float32),
        )
        in_dim = self.layers[0][0].shape[1] if self.layers else self.out[0].shape[1]
        if in_dim != n_obs or self.out[0].shape[0] != 1:
            raise CheckpointError(
                f"RL actor maps {in_dim} inputs to {self.out[0].shape[0]} outputs; expected "
                f"{n_obs} -> 1"
            )

    @property
    def hidden_sizes(self) -> tuple[int, ...]:
        """Hidden layer widths."""
        return tuple(int(w.shape[0]) for w, _ in self.layers)

    def state_dict(self) -> dict[str, np.ndarray]:
        """Tensors by name (for safetensors)."""
        out: dict[str, np.ndarray] = {}
        for i, (w, b) in enumerate(self.layers):
            out[f"hidden.{i}.weight"], out[f"hidden.{i}.bias"] = w, b
        out["out.weight"], out["out.bias"] = self.out
        return out

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        """Actions (..., 1), unclipped, for observations (..., n_obs)."""
        h = np.asarray(obs, dtype=np.float32)
        for w, b in self.layers:
            h = np.tanh(h @ w.T + b)
        return h @ self.out[0].T + self.out[1]


def actor_state_from_sb3(model: Any, n_obs: int = len(OBS_NAMES)) -> dict[str, np.ndarray]:
    """Extract the deterministic actor of an SB3 PPO ``MlpPolicy`` as an :class:`MLPActor` state.

    Raises:
        ConfigError: the policy is not a plain tanh MLP on a flat ``n_obs``-dim observation.
    """
    import torch

    policy = model.policy
    net = policy.mlp_extractor.policy_net
    if tuple(policy.observation_space.shape) != (n_obs,):
        raise ConfigError(
            f"SB3 policy observes {policy.observation_space}, expected {n_obs} entries"
        )
    linears = [m for m in net if isinstance(m, torch.nn.Linear)]
    acts = [m for m in net if not isinstance(m, torch.nn.Linear)]
    if not all(isinstance(a, torch.nn.Tanh) for a in acts) or len(acts) != len(linears):
        raise ConfigError(
            f"RL actor export supports Linear+Tanh MLPs only, got {net}",
            fix="train with policy_kwargs activation_fn=torch.nn.Tanh",
        )
    state: dict[str, np.ndarray] = {}
    for i, lin in enumerate(linears):
        state[f"hidden.{i}.weight"] = lin.weight.detach().cpu().numpy().astype(np.float32)
        state[f"hidden.{i}.bias"] = lin.bias.detach().cpu().numpy().astype(np.float32)
    state["out.weight"] = policy.action_net.weight.detach().cpu().numpy().astype(np.float32)
    state["out.bias"] = policy.action_net.bias.detach().cpu().numpy().astype(np.float32)
    return state


class RLController:
    """Learned steering controller implementing :class:`embodied.contracts.Controller`.

    Each ``update`` builds the training observation (error, integral, derivative,
    alpha_{t-1}, t/T), runs the actor deterministically and moves the command by
    ``max_delta * clip(a, -1, 1)`` within the output limits.

    Args:
        config: Observation/action definition the actor was trained with.
        actor: The trained actor.
        meta: Free-form training metadata (env id, concept, timesteps, returns).
    """

    type_name = CONTROLLER_TYPE

    def __init__(
        self, config: RLControllerConfig, actor: MLPActor, meta: dict[str, Any] | None = None
    ) -> None:
        self.config = config
        self.actor = actor
        self.meta = dict(meta or {})
        self._builder = ObservationBuilder(config)
        self._last_obs = [0.0] * len(config.obs_names())
        self._last_action = 0.0

    def reset(self) -> None:
        """Episode start: clear integral and history, command back to ``initial_output``."""
        self._builder.reset()

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Deterministic actions in [-1, 1] for observations (..., n_obs)."""
        return np.clip(self.actor(obs), -1.0, 1.0)

    def update(self, measurement: float, setpoint: float, dt: float) -> float:
        """One control step; returns the new command (alpha)."""
        obs = self._builder.observe(float(measurement), float(setpoint), float(dt))
        a = float(self.act(np.asarray(obs, dtype=np.float32))[0])
        alpha, _ = self._builder.apply(a)
        self._last_obs, self._last_action = obs, a
        return alpha

    def state(self) -> dict[str, float]:
        """Telemetry: the observation entries, the last action and the output."""
        out = dict(zip(self.config.obs_names(), self._last_obs, strict=True))
        out.update(action=self._last_action, output=self._builder.alpha)
        return out

    # -- persistence ---------------------------------------------------------------------
    def save_pretrained(self, folder: str | os.PathLike[str]) -> Path:
        """Write ``model.safetensors`` and ``config.json`` atomically into ``folder``."""
        from safetensors.numpy import save_file

        path = Path(folder)
        path.mkdir(parents=True, exist_ok=True)
        write_json(
            path / CONFIG_NAME,
            {
                "controller_type": CONTROLLER_TYPE,
                "config": self.config.to_dict(),
                "obs_names": list(self.config.obs_names()),
                "meta": self.meta,
            },
        )
        # weights last: they never stand without their config.json (a kill between writes)
        with atomic_path(path / WEIGHTS_NAME) as tmp:
            save_file(self.actor.state_dict(), str(tmp), metadata={"format": "np"})
        return path

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike[str], **overrides: Any) -> RLController:
        """Load a controller saved by :meth:`save_pretrained`.

        Args:
            folder: The folder with ``config.json`` and ``model.safetensors``.
            **overrides: Config fields to change at load time (e.g. ``horizon_steps``,
                ``output_max``); the actor's shape fields cannot change.
        """
        path = Path(folder)
        cfg_file, w_file = path / CONFIG_NAME, path / WEIGHTS_NAME
        missing = [p.name for p in (cfg_file, w_file) if not p.is_file()]
        if missing:
            raise CheckpointError(
                f"RL controller folder {str(path)!r} lacks {missing}",
                fix="train one with controllers.rl.train_rl_controller and save_pretrained",
            )
        data = read_json_file(cfg_file, what="RL controller config", fix=RESAVE_FIX)
        if data.get("controller_type") != CONTROLLER_TYPE:
            raise CheckpointError(
                f"{cfg_file} has controller_type {data.get('controller_type')!r}, expected 'rl'",
                fix="pass the folder of an RL controller (controller_type 'rl')",
            )
        if not isinstance(data.get("config"), dict):
            raise CheckpointError(
                f"RL controller config {str(cfg_file)!r} lacks the 'config' object",
                fix=RESAVE_FIX,
            )
        for fixed in ("hidden_sizes", "observe_setpoint"):
            if fixed in overrides:
                raise ConfigError(f"{fixed} is fixed by the saved weights; do not override it")
        config = build_from_file(
            cfg_file,
            lambda: RLControllerConfig.from_dict(data["config"]),
            what="RL controller config",
            fix=RESAVE_FIX,
        )
        if data.get("obs_names") != list(config.obs_names()):  # also a damaged (non-list) value
            raise CheckpointError(
                f"{cfg_file} was trained on observations {data.get('obs_names')}, this version "
                f"builds {list(config.obs_names())} from its config",
                fix="retrain the controller",
            )
        if overrides:  # outside build_from_file: a bad override is the caller's, not the file's
            config = RLControllerConfig.from_dict({**config.to_dict(), **overrides})
        weights = load_safetensors_file(
            w_file, what="RL controller weights", fix=RESAVE_FIX, framework="np"
        )
        actor = build_from_file(
            w_file,
            lambda: MLPActor(weights, len(config.obs_names())),
            what="RL controller weights",
            fix=RESAVE_FIX,
        )
        if actor.hidden_sizes != config.hidden_sizes:
            raise CheckpointError(
                f"{w_file} has hidden sizes {actor.hidden_sizes}, "
                f"config says {config.hidden_sizes}",
                fix="config.json and model.safetensors come from different controllers; "
                + RESAVE_FIX,
            )
        meta = data.get("meta", {})
        if not isinstance(meta, dict):
            raise CheckpointError(
                f"RL controller config {str(cfg_file)!r}: 'meta' is {meta!r}, not an object",
                fix=RESAVE_FIX,
            )
        return cls(config, actor, meta=meta)
