"""Scripted policies: the privileged task ``expert``, ``random`` and ``zero``.

``policies.load("expert", env=env, **kw)`` asks the env's task for its scripted expert
(``env.unwrapped.expert(**kw)``), e.g. ``route="left", speed=0.3`` on ``mujoco:reach_around``
or ``speed=0.1`` (m/s) on ``mujoco:arm_reach``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from embodied.contracts import Env, Policy
from embodied.errors import CompatibilityError, ConfigError
from embodied.specs import Observation
from policies import POLICIES


def _require_env(env: Env | None, name: str) -> Env:
    if env is None:
        raise ConfigError(
            f"policy {name!r} needs the env it will run on",
            fix=f"call policies.load({name!r}, env=env)",
        )
    return env


def expert(env: Env | None = None, **kwargs: Any) -> Policy:
    """The task's scripted expert (reads privileged sim state through ``env.unwrapped``)."""
    env = _require_env(env, "expert")
    base = getattr(env, "unwrapped", env)
    factory = getattr(base, "expert", None)
    if factory is None:
        raise CompatibilityError(
            f"env {env.env_id!r} ({type(base).__name__}) has no scripted expert",
            fix="use a mujoco:* task (they all provide one) or a trained policy",
        )
    policy: Policy = factory(**kwargs)
    return policy


class RandomPolicy(Policy):
    """Uniform random actions inside the env's action bounds (infinite bounds -> [-1, 1]).

    Args:
        env: The env (its action spec gives dims and bounds).
        seed: RNG seed; re-seeded on every :meth:`reset` so episodes are reproducible.
    """

    def __init__(self, env: Env, seed: int = 0) -> None:
        super().__init__()
        self.action_dim = env.action_spec.dim
        low, high = env.action_spec.low_array, env.action_spec.high_array
        self.low = np.where(np.isfinite(low), low, -1.0)
        self.high = np.where(np.isfinite(high), high, 1.0)
        self.seed = int(seed)
        self._rng = np.random.default_rng(self.seed)

    def reset(self) -> None:
        """Clear the queue and restart the RNG."""
        super().reset()
        self._rng = np.random.default_rng(self.seed)

    def predict_action_chunk(self, obs: Observation) -> np.ndarray:
        """One uniform random action."""
        return self._rng.uniform(self.low, self.high)[None, :]


class ZeroPolicy(Policy):
    """Always the zero action (clipped into the bounds): a do-nothing baseline."""

    def __init__(self, env: Env) -> None:
        super().__init__()
        self.action_dim = env.action_spec.dim
        self._action = env.action_spec.clip(np.zeros(self.action_dim))

    def predict_action_chunk(self, obs: Observation) -> np.ndarray:
        """One zero action."""
        return self._action[None, :].copy()


def random(env: Env | None = None, seed: int = 0, **kwargs: Any) -> Policy:
    """Uniform random actions inside the action bounds (seeded)."""
    if kwargs:
        raise ConfigError(f"policy 'random' got unknown options {sorted(kwargs)}", fix="pass seed")
    return RandomPolicy(_require_env(env, "random"), seed=seed)


def zero(env: Env | None = None, **kwargs: Any) -> Policy:
    """The zero action every step."""
    if kwargs:
        raise ConfigError(f"policy 'zero' got unknown options {sorted(kwargs)}")
    return ZeroPolicy(_require_env(env, "zero"))


POLICIES.register("expert", expert)
POLICIES.register("random", random)
POLICIES.register("zero", zero)
