"""Task logic of a MuJoCo env, kept apart from the model XML and the gym wrapper.

Like dm_control, an env here is three parts:

* the **model** (an MJCF file in ``sim/mujoco/assets/``): bodies, joints, actuators, cameras;
* the **task** (a :class:`Task` subclass): episode initialisation, how an action becomes
  actuator controls, the state vector, success and diagnostics, and the scripted expert;
* the **env** (:class:`sim.mujoco.env.MujocoEnv`): the gymnasium/:class:`embodied.contracts.Env`
  wrapper that owns the physics, seeding, physics substeps and rendering.

Tasks must keep :meth:`Task.before_step` and :meth:`Task.observe` cheap (precomputed ids,
preallocated buffers): they run every control step and are what ``embodied bench sim``
compares against a bare ``mujoco.mj_step`` loop.
"""

from __future__ import annotations

import abc
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from embodied.errors import ConfigError
from embodied.specs import VectorSpec

if TYPE_CHECKING:
    import mujoco

    from embodied.contracts import Env, Policy

ASSETS = Path(__file__).resolve().parent / "assets"


class Task(abc.ABC):
    """Episode logic of one MuJoCo task.

    Class attributes set by subclasses:
        name: Task name (the part after ``mujoco:`` in the env id).
        description: One line for ``embodied envs``.
        model_file: MJCF file name inside ``sim/mujoco/assets``.
        control_rate_hz: Control (policy) rate in Hz; physics substeps are derived from the
            model timestep: ``round(1 / (control_rate_hz * timestep))``.
        max_episode_steps: Default episode horizon in control steps.
        state_spec: Named fields (with units) of the ``state`` vector.
        action_spec: Named, bounded action dims with units.
        cameras: Camera names in the model that the env may render (first is the default).
        default_image_size: (H, W) of rendered camera images.
        default_camera_on: Whether observations include the first camera by default.
    """

    name: str = ""
    description: str = ""
    model_file: str = ""
    control_rate_hz: float = 20.0
    max_episode_steps: int = 100
    state_spec: VectorSpec
    action_spec: VectorSpec
    cameras: tuple[str, ...] = ()
    default_image_size: tuple[int, int] = (64, 64)
    default_camera_on: bool = False

    def model_xml_path(self) -> Path:
        """Path of the task's MJCF file."""
        return ASSETS / self.model_file

    @abc.abstractmethod
    def bind(self, model: mujoco.MjModel, data: mujoco.MjData) -> None:
        """Look up ids and allocate buffers once, after the model is compiled."""

    @abc.abstractmethod
    def initialize_episode(
        self,
        model: mujoco.MjModel,
        data: mujoco.MjData,
        rng: np.random.Generator,
        options: Mapping[str, Any],
    ) -> None:
        """Set the initial state (after ``mj_resetData``) from ``rng`` and reset ``options``."""

    def check_reset_options(
        self, options: Mapping[str, Any], allowed: Collection[str], fix: str
    ) -> None:
        """Refuse reset ``options`` keys outside ``allowed`` (call from :meth:`initialize_episode`).

        Raises:
            ConfigError: Unknown keys, named, with ``fix``.
        """
        unknown = set(options) - set(allowed)
        if unknown:
            raise ConfigError(f"unknown {self.name} reset options {sorted(unknown)}", fix=fix)

    @abc.abstractmethod
    def before_step(self, model: mujoco.MjModel, data: mujoco.MjData, action: np.ndarray) -> None:
        """Write the (validated, clipped) action into ``data.ctrl``."""

    @abc.abstractmethod
    def observe(self, model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
        """The float32 ``state`` vector (fields as :attr:`state_spec`).

        The env calls :meth:`evaluate` first after every reset and step, so tasks may reuse
        values read there.
        """

    @abc.abstractmethod
    def evaluate(
        self, model: mujoco.MjModel, data: mujoco.MjData, info: dict[str, Any]
    ) -> tuple[float, bool]:
        """Fill ``info`` (``success``, ``ee_pos``, ``ee_vel`` and task diagnostics).

        Returns:
            (reward, terminated) where terminated means the task ended (e.g. a crash).
        """

    def options(self) -> dict[str, Any]:
        """The task's construction options (JSON-serialisable), for dataset metadata."""
        return {}

    def instruction(self) -> str:
        """The instruction of the current episode."""
        return ""

    @abc.abstractmethod
    def expert(self, env: Env, **kwargs: Any) -> Policy:
        """A scripted expert policy that reads privileged state from ``env``."""
