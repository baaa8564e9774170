"""Configuration of the RL steering controller and its training environment, and the PPO
hyperparameters (:class:`PPOSettings`) every PPO user of the project embeds."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from embodied.config import Rule, checked, config_from_dict, config_to_dict, validate
from embodied.errors import ConfigError

OBS_NAMES = ("error", "integral", "derivative", "alpha_prev", "progress")
"""Observation entries: scaled error, its clipped time integral (s), its scaled derivative,
the previous command and episode progress t / T (then ``setpoint`` with
:attr:`RLControllerConfig.observe_setpoint`)."""


@dataclass
class RLControllerConfig:
    """Observation, action and reward definition shared by training env and controller.

    Observation (all float32), with ``e = (setpoint - measurement) / error_scale``:
    ``(e, clip(sum e dt, +-integral_limit_s), clip(derivative_time_s * de/dt, +-obs_clip),
    alpha_{t-1}, min(t / horizon_steps, 1))``, then ``clip(setpoint / error_scale, +-obs_clip)``
    with ``observe_setpoint``.

    Action: ``a`` in [-1, 1]; the command moves by ``delta_alpha = max_delta * a`` per step
    and is clipped into ``[output_min, output_max]``.

    Reward per step: ``-error_weight * |e_{t+1}| - lambda_delta * |delta_alpha|
    + beta_success * success`` (the last term only at the end of the episode).

    Args:
        output_min: Lowest command (knob low bound).
        output_max: Highest command (knob high bound).
        initial_output: Command at episode start.
        max_delta: Largest command change per control step (knob units).
        error_scale: Measurement units per unit of scaled error (e.g. 0.1 m/s).
        integral_limit_s: Clip of the scaled error's integral (s).
        derivative_time_s: Multiplies d e / dt (s), so it is comparable to e.
        obs_clip: Clip of the scaled error and derivative.
        horizon_steps: T of the progress feature (the inner episode length).
        error_weight: Weight of the tracking error in the reward (1: the earlier reward); a
            larger weight makes a small steady error cost more against the command-change
            penalty and the success bonus, without changing what the actor observes (ours).
        lambda_delta: Penalty weight of |delta_alpha|.
        beta_success: Bonus for task success at the end of the episode.
        setpoint_low: Lowest training setpoint (measurement units).
        setpoint_high: Highest training setpoint; each episode draws one uniformly.
        hidden_sizes: Hidden layer widths of the actor (and critic) MLP, tanh activations.
        observe_setpoint: Also observe the setpoint itself, so one actor can start each
            setpoint from its own command (feedforward) instead of finding it by feedback
            alone; off for controllers saved before it existed.
    """

    config_name: ClassVar[str] = "RL controller"

    output_min: float = checked(-1.0, fix="use the knob's low bound, e.g. -1.0")
    output_max: float = checked(1.0, fix="use the knob's high bound, e.g. 1.0")
    initial_output: float = checked(0.0, fix="use a command inside [output_min, output_max]")
    max_delta: float = checked(0.2, gt=0, fix="use e.g. 0.2")
    error_scale: float = checked(0.1, gt=0, fix="use e.g. 0.1")
    integral_limit_s: float = checked(5.0, gt=0, fix="use e.g. 5.0")
    derivative_time_s: float = checked(0.1, gt=0, fix="use e.g. 0.1")
    obs_clip: float = checked(10.0, gt=0, fix="use e.g. 10.0")
    horizon_steps: int = checked(200, ge=1, fix="use the inner episode length, e.g. 200")
    error_weight: float = checked(1.0, gt=0, fix="use e.g. 1.0")
    lambda_delta: float = checked(0.1, ge=0, fix="use e.g. 0.1")
    beta_success: float = checked(1.0, ge=0, fix="use e.g. 1.0")
    setpoint_low: float = checked(0.05, fix="use e.g. 0.05")
    setpoint_high: float = checked(0.2, fix="use e.g. 0.2")
    hidden_sizes: tuple[int, ...] = checked((64, 64), ge=1, min_len=1, fix="use e.g. (64, 64)")
    observe_setpoint: bool = False

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "output_min",
            lambda c: c.output_min < c.output_max,
            "must be < output_max={output_max}",
            "swap or widen the command bounds",
        ),
        Rule(
            "initial_output",
            lambda c: c.output_min <= c.initial_output <= c.output_max,
            "outside [{output_min}, {output_max}]",
            "use a command inside [output_min, output_max]",
        ),
        Rule(
            "setpoint_low",
            lambda c: c.setpoint_low <= c.setpoint_high,
            "must be <= setpoint_high={setpoint_high}",
            "swap setpoint_low and setpoint_high",
        ),
        Rule(
            "hidden_sizes",
            lambda c: all(isinstance(h, int) and not isinstance(h, bool) for h in c.hidden_sizes),
            "must be positive ints",
            "use e.g. (64, 64)",
        ),
    )

    def __post_init__(self) -> None:
        self.hidden_sizes = tuple(self.hidden_sizes)
        validate(self)
        self.horizon_steps = int(self.horizon_steps)

    def obs_names(self) -> tuple[str, ...]:
        """The observation entries this config builds, in order."""
        return (*OBS_NAMES, "setpoint") if self.observe_setpoint else OBS_NAMES

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict."""
        return config_to_dict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RLControllerConfig:
        """Inverse of :meth:`to_dict`; unknown keys raise ``ConfigError`` naming them."""
        return config_from_dict(cls, d, what="RL controller config")


class ObservationBuilder:
    """Builds the RL observation from measurements and applies actions to the command.

    The same object logic runs in :class:`~controllers.rl.env.SteeringEnv` (training) and in
    :class:`~controllers.rl.modeling_rl.RLController` (deployment), so both see identical
    observations.
    """

    def __init__(self, config: RLControllerConfig) -> None:
        self.config = config
        self.reset()

    def reset(self) -> None:
        """Episode start: zero integral, no previous error, initial command, t = 0."""
        self.integral = 0.0
        self.e_prev = math.nan
        self.error = 0.0
        self.alpha = self.config.initial_output
        self.t = 0

    def observe(self, measurement: float, setpoint: float, dt: float) -> list[float]:
        """Observation for this step (advances t; a NaN measurement repeats the last error)."""
        c = self.config
        if not dt > 0:
            raise ConfigError(f"RL controller needs dt > 0 s, got {dt!r}", fix="pass env.dt")
        e = (setpoint - measurement) / c.error_scale
        if e != e:  # NaN measurement (sensor dropout): hold the last error
            e = 0.0 if self.e_prev != self.e_prev else self.e_prev
        lim = c.obs_clip
        e = max(-lim, min(lim, e))
        self.integral = max(-c.integral_limit_s, min(c.integral_limit_s, self.integral + e * dt))
        deriv = 0.0 if self.e_prev != self.e_prev else (e - self.e_prev) / dt * c.derivative_time_s
        deriv = max(-lim, min(lim, deriv))
        self.e_prev = self.error = e
        progress = min(self.t / c.horizon_steps, 1.0)
        self.t += 1
        obs = [e, self.integral, deriv, self.alpha, progress]
        if c.observe_setpoint:
            obs.append(max(-lim, min(lim, setpoint / c.error_scale)))
        return obs

    def apply(self, action: float) -> tuple[float, float]:
        """Move the command by ``max_delta * clip(action, -1, 1)``; returns (alpha, delta)."""
        c = self.config
        a = float(action)
        if a != a:
            raise ConfigError("RL controller action is NaN", fix="check the policy weights")
        a = max(-1.0, min(1.0, a))
        new = max(c.output_min, min(c.output_max, self.alpha + c.max_delta * a))
        delta = new - self.alpha
        self.alpha = new
        return new, delta


@dataclass(frozen=True)
class PPOSettings:
    """PPO hyperparameters, as stable-baselines3's ``PPO`` takes them (and its subclasses:
    sb3-contrib's ``MaskablePPO``, :class:`controllers.rl.reppo.RePPO`).

    The one declaration of these settings: the defaults are stable-baselines3's own, and each
    user embeds a ``PPOSettings`` holding its own choices (the RL steering controller's
    training, ``embodied lab reward rl``, ``lab shield``, ``lab reppo``), whose commands take
    the fields as ``--n-steps``, ``--batch-size``, ... (:meth:`sb3_kwargs` passes them on).

    Args:
        n_steps: PPO rollout length per env and update.
        batch_size: PPO minibatch size.
        n_epochs: PPO optimisation epochs per update.
        learning_rate: Adam step size.
        gamma: Discount factor.
        gae_lambda: GAE lambda (bias-variance trade-off of the advantages).
        clip_range: PPO clipping range of the probability ratio.
        ent_coef: Entropy bonus coefficient (0: no exploration bonus).
    """

    config_name: ClassVar[str] = "PPO"

    n_steps: int = checked(2048, ge=1, fix="e.g. n_steps=2048")
    batch_size: int = checked(64, ge=1, fix="e.g. batch_size=64")
    n_epochs: int = checked(10, ge=1, fix="e.g. n_epochs=10")
    learning_rate: float = checked(3e-4, gt=0, fix="e.g. learning_rate=0.0003")
    gamma: float = checked(0.99, gt=0, le=1, fix="e.g. gamma=0.99")
    gae_lambda: float = checked(0.95, gt=0, le=1, fix="e.g. gae_lambda=0.95")
    clip_range: float = checked(0.2, gt=0, fix="e.g. clip_range=0.2")
    ent_coef: float = checked(0.0, ge=0, fix="e.g. ent_coef=0")

    def __post_init__(self) -> None:
        validate(self)

    def sb3_kwargs(self) -> dict[str, Any]:
        """The settings as keyword arguments of ``stable_baselines3.PPO`` (and subclasses)."""
        return dataclasses.asdict(self)


def merge_ppo_layers(ppo: PPOSettings, *layers: Mapping[str, Any]) -> dict[str, Any]:
    """Config fields from ``layers``, later ones winning (e.g. a budget preset, then the options
    given on the command line), whose ``"ppo"`` entries are merged field by field on top of
    ``ppo`` (the config's default).

    A layer's ``"ppo"`` is a whole :class:`PPOSettings` (it replaces what came before) or a
    mapping of some of its fields (``{"n_steps": 512}``, as the command line gives them).

    Returns:
        The merged fields; ``"ppo"`` a :class:`PPOSettings` when any layer had one.

    Raises:
        ConfigError: an unknown PPO field, or a value :class:`PPOSettings` refuses.
    """
    out: dict[str, Any] = {}
    names = [f.name for f in dataclasses.fields(PPOSettings)]
    for layer in layers:
        for key, value in layer.items():
            if key != "ppo":
                out[key] = value
            elif isinstance(value, PPOSettings):
                out["ppo"] = ppo = value
            else:
                unknown = sorted(set(value) - set(names))
                if unknown:
                    raise ConfigError(f"unknown PPO setting(s) {unknown}", fix=f"use {names}")
                out["ppo"] = ppo = dataclasses.replace(ppo, **value)
    return out
