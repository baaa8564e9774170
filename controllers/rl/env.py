"""Gymnasium env for training a steering controller on real steered rollouts.

Each RL step is one control step of the closed loop :func:`embodied.loop.rollout` running an
inner :class:`~embodied.contracts.Env` with a frozen :class:`~embodied.contracts.Steerable`
policy: the agent's action moves the knob, the loop selects the policy action and steps the
env, and the concept measured at the next step gives the observation and reward.

The inner rollout runs in a worker thread and hands control back at every controller call
(a :class:`_BridgeController` in the loop's steering slot), so training uses THE loop -
safety filters, action validation and success handling included - rather than a copy of it.
The two threads never run at the same time (strict hand-off through queues), so rollouts
are as deterministic as a plain call to ``rollout``.
"""

from __future__ import annotations

import math
import queue
import threading
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from controllers.rl.configuration_rl import ObservationBuilder, RLControllerConfig
from embodied.contracts import ActionFilter, Concept, Env, Policy, Steerable
from embodied.errors import CompatibilityError, ConfigError
from embodied.loop import Steering, rollout

_STOP = object()


class _Abort(Exception):
    """Raised inside the worker's rollout to end it early (env reset/close)."""


class _BridgeController:
    """Controller that hands each measurement to the RL agent and returns its command."""

    def __init__(self) -> None:
        self.to_agent: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.from_agent: queue.Queue[Any] = queue.Queue()

    def reset(self) -> None:
        """Nothing to clear; the agent side keeps the state."""

    def update(self, measurement: float, setpoint: float, dt: float) -> float:
        """Wait for the agent's command for this step."""
        self.to_agent.put(("measure", (float(measurement), float(setpoint), float(dt))))
        command = self.from_agent.get()
        if command is _STOP:
            raise _Abort
        return float(command)


class SteeringEnv(gym.Env[np.ndarray, np.ndarray]):
    """RL env: observation (error, integral, derivative, alpha_{t-1}, t/T); action delta-alpha.

    Args:
        env: The inner embodied env (its ``max_episode_steps`` is the default horizon).
        policy: A frozen Steerable policy with knob ``knob``.
        concept: The measured signal.
        config: Observation/action/reward definition; ``horizon_steps`` is the inner episode
            length; setpoints are drawn per episode from ``[setpoint_low, setpoint_high]``
            (or passed with ``reset(options={"setpoint": x})``).
        knob: Name of the scalar knob the command drives.
        to_knob: Optional map of the command onto the knob value (e.g. for a vector knob).
        safety: Optional action filter of the inner loop.
        reset_options: Passed to the inner env's reset (e.g. a scene).
        rest: Knob command while the concept is undefined (:attr:`embodied.loop.Steering.rest`:
            those inner steps are not the agent's); None: the agent acts on them too.

    ``info`` of each step holds ``measurement``, ``setpoint``, ``alpha``, ``delta`` and at
    the end ``success`` and ``reason``.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012

    def __init__(
        self,
        env: Env,
        policy: Policy,
        concept: Concept,
        config: RLControllerConfig | None = None,
        knob: str = "alpha",
        to_knob: Callable[[float], float | np.ndarray] | None = None,
        safety: ActionFilter | None = None,
        reset_options: dict[str, Any] | None = None,
        rest: float | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(policy, Steerable):
            raise CompatibilityError(
                f"SteeringEnv needs a Steerable policy; {type(policy).__name__} has no knobs",
                fix="wrap the policy, e.g. policies.load('expert_speed_knob', env=env)",
            )
        if knob not in policy.knobs():
            raise CompatibilityError(
                f"policy {type(policy).__name__} has no knob {knob!r}; knobs: {sorted(policy.knobs())}"
            )
        self.config = (
            config
            if config is not None
            else RLControllerConfig(horizon_steps=env.max_episode_steps)
        )
        k = policy.knobs()[knob]
        if to_knob is None and (
            k.size != 1 or self.config.output_min < k.low[0] or self.config.output_max > k.high[0]
        ):
            raise ConfigError(
                f"RL command range [{self.config.output_min}, {self.config.output_max}] does not "
                f"fit knob {knob!r} (size {k.size}, bounds {list(k.low)}..{list(k.high)})",
                fix="set output_min/output_max within the knob bounds or pass to_knob",
            )
        self.inner_env, self.policy, self.concept = env, policy, concept
        self.knob, self.to_knob, self.safety = knob, to_knob, safety
        self.reset_options = dict(reset_options or {})
        self.rest = rest
        lim = self.config.obs_clip
        extra = [lim] if self.config.observe_setpoint else []
        high = np.array(
            [lim, self.config.integral_limit_s, lim, self.config.output_max, 1.0, *extra],
            dtype=np.float32,
        )
        low = np.array(
            [-lim, -self.config.integral_limit_s, -lim, self.config.output_min, 0.0]
            + [-x for x in extra],
            dtype=np.float32,
        )
        self.observation_space = gym.spaces.Box(low, high, dtype=np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self.obs_names = self.config.obs_names()
        self.builder = ObservationBuilder(self.config)
        self._bridge: _BridgeController | None = None
        self._thread: threading.Thread | None = None
        self._obs = np.zeros(len(self.obs_names), dtype=np.float32)
        self.setpoint = math.nan
        self.last_episode: Any = None

    # -- worker ---------------------------------------------------------------------------
    def _run(self, bridge: _BridgeController, setpoint: float, seed: int | None) -> None:
        try:
            episode = rollout(
                self.inner_env,
                self.policy,
                steering=Steering(
                    self.concept, bridge, self.knob, setpoint, self.to_knob, self.rest
                ),
                safety=self.safety,
                seed=seed,
                reset_options=self.reset_options or None,
                max_steps=self.config.horizon_steps,
                record_images=False,
            )
        except _Abort:
            return
        except BaseException as exc:  # hand any failure to the agent thread
            bridge.to_agent.put(("error", exc))
            return
        bridge.to_agent.put(("done", episode))

    def _stop_worker(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            assert self._bridge is not None
            self._bridge.from_agent.put(_STOP)
            self._thread.join(timeout=30.0)
        self._thread = self._bridge = None

    def _receive(self) -> tuple[str, Any]:
        assert self._bridge is not None
        kind, payload = self._bridge.to_agent.get()
        if kind == "error":
            self._thread = self._bridge = None
            raise payload
        return kind, payload

    # -- gym API --------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start a new inner episode; ``options={"setpoint": x}`` fixes the setpoint."""
        super().reset(seed=seed)
        self._stop_worker()
        options = dict(options or {})
        unknown = sorted(set(options) - {"setpoint", "inner_seed"})
        if unknown:
            raise ConfigError(
                f"SteeringEnv.reset got unknown options {unknown}", fix="use setpoint, inner_seed"
            )
        if "setpoint" in options:
            setpoint = float(options["setpoint"])
        else:
            setpoint = float(
                self.np_random.uniform(self.config.setpoint_low, self.config.setpoint_high)
            )
        inner_seed = options.get("inner_seed")
        if inner_seed is None:
            inner_seed = int(self.np_random.integers(0, 2**31 - 1))
        self.setpoint = setpoint
        self.builder.reset()
        self._bridge = _BridgeController()
        self._thread = threading.Thread(
            target=self._run,
            args=(self._bridge, setpoint, inner_seed),
            daemon=True,
            name="steering-env-rollout",
        )
        self._thread.start()
        kind, payload = self._receive()
        if kind != "measure":
            raise ConfigError("the inner episode ended before its first control step")
        m, sp, dt = payload
        self._obs = np.asarray(self.builder.observe(m, sp, dt), dtype=np.float32)
        return self._obs.copy(), {"measurement": m, "setpoint": sp, "inner_seed": inner_seed}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Apply delta-alpha, run one inner control step, measure, reward."""
        if self._bridge is None:
            raise ConfigError("SteeringEnv.step before reset", fix="call reset() first")
        a = float(np.asarray(action, dtype=np.float64).reshape(-1)[0])
        alpha, delta = self.builder.apply(a)
        self._bridge.from_agent.put(alpha)
        kind, payload = self._receive()
        c = self.config
        info: dict[str, Any] = {"alpha": alpha, "delta": delta, "setpoint": self.setpoint}
        if kind == "measure":
            m, sp, dt = payload
            self._obs = np.asarray(self.builder.observe(m, sp, dt), dtype=np.float32)
            info["measurement"] = m
            return self._obs.copy(), self._tracking_reward(delta), False, False, info
        episode = payload  # "done": the inner episode ended after this step
        self.last_episode = episode
        self._thread = self._bridge = None
        reason = episode.meta.get("reason", "")
        reward = self._tracking_reward(delta) + c.beta_success * float(episode.success)
        info.update(success=bool(episode.success), reason=reason, episode_length=len(episode))
        # An inner episode that ends at success is reported as truncated: the tracking
        # objective has not ended, so PPO bootstraps the value there. Reporting "terminated"
        # would make the (negative) per-step error reward favour finishing early (speeding up)
        # over tracking the setpoint. Only an env failure ("terminated") is a true terminal.
        terminated = reason == "terminated"
        return self._obs.copy(), float(reward), terminated, not terminated, info

    def _tracking_reward(self, delta: float) -> float:
        """Per-step reward: the weighted tracking error and the knob's step, both penalised."""
        c = self.config
        return float(-c.error_weight * abs(self.builder.error) - c.lambda_delta * abs(delta))

    def close(self) -> None:
        """Stop a running inner episode."""
        self._stop_worker()
        super().close()
