"""The contracts every component implements.

* :class:`Env` - a gymnasium env with specs, an instruction and a control rate (Hz).
* :class:`Policy` - action chunks with a queue-based receding horizon.
* :class:`Steerable` - a policy with named, bounded continuous knobs.
* :class:`Controller` - ``update(measurement, setpoint, dt) -> command``.
* :class:`Concept` - a scalar signal measured from the rollout each step.
* :class:`Judge` - probability of task success from frames + instruction.
* :class:`ActionFilter` - the safety stage between policy and env.
"""

from __future__ import annotations

import abc
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np

from embodied.config import Rule, validate
from embodied.errors import CompatibilityError, ConfigError
from embodied.specs import (
    GRIPPER_CONVENTIONS,
    IMAGE_ORIENTATIONS,
    Observation,
    ObservationSpec,
    VectorSpec,
    check_convention,
)


class Env(gym.Env[Observation, np.ndarray], abc.ABC):
    """A gymnasium env that follows the ``embodied`` observation/action contract.

    Subclasses set :attr:`observation_spec`, :attr:`action_spec`, :attr:`control_rate_hz`,
    :attr:`max_episode_steps` and :attr:`env_id`, and return ``info["success"]`` (bool)
    from ``reset`` and ``step``. Where an end effector exists, ``info["ee_pos"]`` (m, world
    frame) and ``info["ee_vel"]`` (m/s) are reported too, for concept signals.
    ``render()`` returns the default camera as uint8 (H, W, 3), upright (for videos and judges).

    Conventions are declared, not converted: observation images come as the renderer or camera
    delivers them (their :attr:`~embodied.specs.ImageSpec.orientation` says how), and an env
    with a gripper sets :attr:`gripper_convention` to the meaning its ``gripper`` action dim
    has (:data:`~embodied.specs.GRIPPER_CONVENTIONS`; None: no gripper or undeclared).
    """

    observation_spec: ObservationSpec
    action_spec: VectorSpec
    control_rate_hz: float
    max_episode_steps: int
    env_id: str = ""
    instruction: str = ""
    gripper_convention: str | None = None
    metadata: dict[str, Any] = {"render_modes": ["rgb_array"]}  # noqa: RUF012

    @property
    def dt(self) -> float:
        """Control period in seconds (1 / control_rate_hz)."""
        return 1.0 / self.control_rate_hz

    def describe(self) -> dict[str, Any]:
        """JSON-serialisable description (id, specs, rate, horizon)."""
        return {
            "env_id": self.env_id,
            "instruction": self.instruction,
            "control_rate_hz": self.control_rate_hz,
            "max_episode_steps": self.max_episode_steps,
            "observation": self.observation_spec.to_dict(),
            "action": self.action_spec.to_dict(),
            "gripper_convention": self.gripper_convention,
        }


@dataclass(frozen=True)
class Knob:
    """A continuous, bounded input of a policy that can be set between steps.

    Args:
        name: Knob name, e.g. ``"alpha"`` (steering strength) or ``"z"`` (behaviour parameter).
        low: Lower bound per element.
        high: Upper bound per element.
        default: Value after ``reset()``.
        units: Unit string (``"1"`` for dimensionless).
        description: One line for CLIs and UIs.
    """

    name: str
    low: tuple[float, ...]
    high: tuple[float, ...]
    default: tuple[float, ...]
    units: str = "1"
    description: str = ""

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "default",
            lambda c: len(c.low) == len(c.high) == len(c.default) >= 1,
            "and low={low!r}, high={high!r}: lengths differ (or are 0)",
            "give low, high and default one value per element",
        ),
        Rule(
            "default",
            lambda c: all(
                lo <= d <= hi for lo, hi, d in zip(c.low, c.high, c.default, strict=True)
            ),
            "outside [low={low!r}, high={high!r}]",
            "pick a default inside the bounds",
        ),
    )

    @property
    def config_name(self) -> str:
        """How errors name this knob."""
        return f"knob {self.name!r}"

    def __post_init__(self) -> None:
        validate(self)

    @classmethod
    def scalar(cls, name: str, low: float, high: float, default: float = 0.0, **kw: Any) -> Knob:
        """A one-element knob."""
        return cls(name, (low,), (high,), (default,), **kw)

    @property
    def size(self) -> int:
        """Number of elements."""
        return len(self.low)

    def validate(self, value: float | Sequence[float] | np.ndarray) -> np.ndarray:
        """Return ``value`` as a float64 array of :attr:`size`, refusing NaN and out-of-range."""
        arr = np.atleast_1d(np.asarray(value, dtype=np.float64))
        if arr.shape != (self.size,):
            raise ConfigError(f"knob {self.name!r} takes {self.size} value(s), got {arr.tolist()}")
        if not np.isfinite(arr).all():
            raise ConfigError(f"knob {self.name!r} got non-finite value {arr.tolist()}")
        lo, hi = np.asarray(self.low), np.asarray(self.high)
        if ((arr < lo) | (arr > hi)).any():
            raise ConfigError(
                f"knob {self.name!r} value {arr.tolist()} outside [{list(self.low)}, "
                f"{list(self.high)}]",
                fix="clip the command to the knob bounds (controllers have output limits)",
            )
        return arr


class Policy(abc.ABC):
    """Maps observations to action chunks; executes them with a receding horizon.

    Subclasses implement :meth:`predict_action_chunk`. :meth:`select_action` keeps a queue:
    when it is empty it predicts a chunk and enqueues its first :attr:`n_action_steps` rows.

    Attributes:
        action_dim: Size of one action vector.
        n_action_steps: Rows of each chunk executed before re-planning.
        chunk_length: Rows of each predicted chunk, or None (undeclared: not checked); bounds
            the rows an execution setting may run (``embodied eval --execute-steps``).
        image_keys: Observation image keys the policy reads (``image.<camera>``).
        image_size: (H, W) the policy expects, or None if it resizes itself / uses no image.
        image_orientation: Orientation of the env frames the policy's processor takes
            (:data:`~embodied.specs.IMAGE_ORIENTATIONS`), or None (undeclared: not checked).
        gripper_convention: Meaning of the gripper dim of the actions the policy outputs
            (:data:`~embodied.specs.GRIPPER_CONVENTIONS`), or None (no gripper / undeclared).
    """

    action_dim: int
    n_action_steps: int = 1
    chunk_length: int | None = None
    image_keys: tuple[str, ...] = ()
    image_size: tuple[int, int] | None = None
    image_orientation: str | None = None
    gripper_convention: str | None = None

    def __init__(self) -> None:
        self._queue: deque[np.ndarray] = deque()

    def reset(self) -> None:
        """Clear the action queue and any observation history (call at episode start)."""
        self._queue.clear()

    def seed_episode(self, seed: int) -> None:
        """Seed the policy's own randomness (e.g. diffusion sampling noise) for one episode.

        :func:`embodied.loop.rollout` calls it after :meth:`reset` with the episode's reset
        seed, so every path that rolls out episode ``seed`` (``embodied eval``, experiments,
        tuning) draws the same noise and reports the same outcome. Deterministic policies
        keep this no-op.
        """
        del seed  # nothing to seed in a deterministic policy

    @abc.abstractmethod
    def predict_action_chunk(self, obs: Observation) -> np.ndarray:
        """Predict an action chunk of shape (n_steps, action_dim) for ``obs``."""

    def select_action(self, obs: Observation) -> np.ndarray:
        """The next action (action_dim,), re-planning when the queue runs empty."""
        if not self._queue:
            chunk = np.asarray(self.predict_action_chunk(obs), dtype=np.float64)
            if chunk.ndim != 2 or chunk.shape[1] != self.action_dim:
                raise CompatibilityError(
                    f"{type(self).__name__}.predict_action_chunk returned shape {chunk.shape}, "
                    f"expected (n_steps, {self.action_dim})"
                )
            self._queue.extend(chunk[: self.n_action_steps])
        return self._queue.popleft()

    # ---- serving: a policy answering observations that arrive over the network -----------
    history_steps: int = 1
    """Observations the policy conditions on (1: the current one). A served policy with more
    is sent every step's observation (``embodied/op: observe``), so its history is the one it
    would keep in process."""

    privileged: bool = False
    """Whether the policy reads the simulator's internal state rather than the observation
    (scripted experts): such a policy cannot be served, its server has no client's simulator."""

    foreign_observation_keys: tuple[str, ...] = ()
    """Keys of a peer's observations the policy's processor maps onto its own (e.g. openpi's
    LIBERO client's ``observation/image``), listed in a server's metadata."""

    def observe(self, obs: Observation) -> None:
        """Record ``obs`` in the observation history without planning (no-op without one)."""
        del obs  # a policy without history has nothing to record

    def fresh_chunk(self, obs: Observation) -> np.ndarray:
        """Record ``obs`` and predict a fresh chunk (n_steps, action_dim) of env actions.

        What a policy server answers: unlike :meth:`select_action` it neither reads nor fills
        the queue, so the caller executes the chunk as it chooses (synchronously, or
        asynchronously with chunks merged).
        """
        self.observe(obs)
        return self.predict_action_chunk(obs)

    supports_rtc: bool = False
    """Whether :meth:`guided_chunk` (real-time chunking) is implemented."""

    def guided_chunk(self, obs: Observation, prefix: np.ndarray, delay: int) -> np.ndarray:
        """Like :meth:`fresh_chunk`, with the chunk's first rows inpainted toward ``prefix``.

        Real-time chunking (Black, Galliker and Levine 2025): ``prefix`` (n, action_dim) holds
        the previous chunk's actions for the steps from this observation on; its first
        ``delay`` rows execute while this chunk is computed.

        Raises:
            CompatibilityError: the policy does not implement it (:attr:`supports_rtc`).
        """
        del obs, prefix, delay
        raise CompatibilityError(
            f"{type(self).__name__} has no real-time chunking",
            fix="drop rtc, or use a diffusion policy (PDP/DP), which implements it",
        )

    def fork(self) -> Policy:
        """An independent episode state (queue, history, knob values, noise) sharing weights.

        A policy server gives each connection its own fork, so clients do not interleave their
        histories. Policies with more per-episode state extend :meth:`_fork_state`.
        """
        import copy

        twin = copy.copy(self)
        twin._queue = deque()
        values = getattr(self, "_knob_values", None)
        if values is not None:
            twin._knob_values = {k: v.copy() for k, v in values.items()}  # type: ignore[attr-defined]
        self._fork_state(twin)
        return twin

    def _fork_state(self, twin: Policy) -> None:
        """Give ``twin`` (a shallow copy) fresh copies of this policy's mutable episode state."""
        del twin  # the base policy's only episode state is the queue

    def adapt_observation(self, raw: Mapping[str, Any]) -> Observation:
        """The policy's observation from a request's keys (``state``, ``image.<camera>``,
        ``instruction``, or a peer's keys the policy's processor maps).

        Raises:
            CompatibilityError: keys the policy cannot read, naming the keys it takes.
        """
        foreign = [k for k in raw if "/" in k or k == "prompt"]
        if foreign:
            raise CompatibilityError(
                f"{type(self).__name__} does not read observation keys {sorted(foreign)}",
                fix="send the project's keys (state, image.<camera>, instruction), or serve a "
                "policy whose processor maps these keys",
            )
        return dict(raw)

    def convention_fix(self, env: Env) -> str:
        """How to fix a convention mismatch with ``env`` (policies name their own option)."""
        return (
            "configure the policy for this env's conventions (the policy's processor owns every "
            "image and gripper conversion; the env only declares what it delivers and takes)"
        )

    def check_compatible(self, env: Env) -> None:
        """Refuse an env whose action dim, cameras, image size or conventions do not match.

        A declared :attr:`image_orientation` must equal the orientation of every camera the
        policy reads, and a declared :attr:`gripper_convention` the env's (when the env
        declares one).

        Raises:
            CompatibilityError: naming the mismatch and both sides, before the first step.
        """
        if env.action_spec.dim != self.action_dim:
            raise CompatibilityError(
                f"policy {type(self).__name__} outputs {self.action_dim}-dim actions but env "
                f"{env.env_id!r} takes {env.action_spec.dim} ({env.action_spec.names})",
                fix="train or configure the policy for this env's action space",
            )
        cams = env.observation_spec.cameras
        for key in self.image_keys:
            cam = key.removeprefix("image.")
            if cam not in cams:
                raise CompatibilityError(
                    f"policy reads {key!r} but env {env.env_id!r} has cameras {sorted(cams)}",
                    fix="enable that camera on the env or pick another policy image key",
                )
            if self.image_size is not None and (cams[cam].height, cams[cam].width) != tuple(
                self.image_size
            ):
                raise CompatibilityError(
                    f"policy expects {key} at {self.image_size[0]}x{self.image_size[1]} but env "
                    f"renders {cams[cam].height}x{cams[cam].width}",
                    fix="set the env's camera size to the policy's image size",
                )
        self._check_conventions(env)

    def _check_conventions(self, env: Env) -> None:
        name = type(self).__name__
        mine = check_convention("gripper convention", self.gripper_convention)
        theirs = check_convention("gripper convention", env.gripper_convention)
        if mine is not None and theirs is not None and mine != theirs:
            raise CompatibilityError(
                f"policy {name} outputs gripper commands as {mine!r} ({GRIPPER_CONVENTIONS[mine]})"
                f" but env {env.env_id!r} takes {theirs!r} ({GRIPPER_CONVENTIONS[theirs]})",
                fix=self.convention_fix(env),
            )
        want = check_convention("image orientation", self.image_orientation)
        if want is None:
            return
        cams = env.observation_spec.cameras
        for key in self.image_keys:
            spec = cams.get(key.removeprefix("image."))
            if spec is not None and spec.orientation != want:
                raise CompatibilityError(
                    f"policy {name} expects {key} frames {want!r} ({IMAGE_ORIENTATIONS[want]}) "
                    f"but env {env.env_id!r} delivers them {spec.orientation!r} "
                    f"({IMAGE_ORIENTATIONS[spec.orientation]})",
                    fix=self.convention_fix(env),
                )


@runtime_checkable
class Steerable(Protocol):
    """A policy with named continuous knobs, settable between control steps."""

    def knobs(self) -> Mapping[str, Knob]:
        """The knobs by name."""
        ...

    def set_knob(self, name: str, value: float | Sequence[float] | np.ndarray) -> None:
        """Set knob ``name``; out-of-bounds or NaN values raise ``ConfigError``."""
        ...

    def get_knob(self, name: str) -> np.ndarray:
        """Current value of knob ``name``."""
        ...


class KnobMixin:
    """Stores knob values for a :class:`Steerable` policy; subclasses define ``_knobs``."""

    _knobs: dict[str, Knob]
    _knob_values: dict[str, np.ndarray]

    def knobs(self) -> Mapping[str, Knob]:
        """The knobs by name."""
        return self._knobs

    def _knob(self, name: str) -> Knob:
        if name not in self._knobs:
            raise ConfigError(f"unknown knob {name!r}; knobs: {sorted(self._knobs)}")
        return self._knobs[name]

    def set_knob(self, name: str, value: float | Sequence[float] | np.ndarray) -> None:
        """Set knob ``name`` after validating it against its bounds."""
        if not hasattr(self, "_knob_values"):
            self._knob_values = {}
        self._knob_values[name] = self._knob(name).validate(value)

    def get_knob(self, name: str) -> np.ndarray:
        """Current value of knob ``name`` (its default until set)."""
        knob = self._knob(name)
        values = getattr(self, "_knob_values", {})
        return values.get(name, np.asarray(knob.default, dtype=np.float64)).copy()

    def reset_knobs(self) -> None:
        """Return every knob to its default."""
        self._knob_values = {}


@runtime_checkable
class Controller(Protocol):
    """A feedback controller: ``command = update(measurement, setpoint, dt)``."""

    def reset(self) -> None:
        """Clear internal state (integrator, filters, previous output)."""
        ...

    def update(self, measurement: float, setpoint: float, dt: float) -> float:
        """One control step; ``dt`` is the time since the last update in seconds."""
        ...


@runtime_checkable
class Concept(Protocol):
    """A scalar concept signal (e.g. end-effector speed in m/s) measured every step."""

    name: str
    units: str

    def reset(self) -> None:
        """Clear history at episode start."""
        ...

    def measure(self, obs: Observation, info: Mapping[str, Any], dt: float) -> float:
        """Measure the concept from the latest observation and env info."""
        ...


@runtime_checkable
class Judge(Protocol):
    """Scores task success from camera frames and a language instruction."""

    def score(self, frames: Sequence[np.ndarray] | np.ndarray, instruction: str) -> float:
        """Probability in [0, 1] that the clip ``frames`` (uint8 (T, H, W, 3)) shows success."""
        ...


@runtime_checkable
class ActionFilter(Protocol):
    """Safety stage between policy and env: returns the action that may be sent."""

    def reset(self) -> None:
        """Clear state at episode start."""
        ...

    def __call__(self, action: np.ndarray, obs: Observation) -> np.ndarray:
        """Filtered action (clipped, or raises ``SafetyFault`` to stop)."""
        ...
