"""The LIBERO evaluation protocol as one frozen, validated, serialisable object.

Defaults follow the OpenVLA LIBERO evaluation (``experiments/robot/libero/run_libero_eval.py``):

==================  ==========================================================
max steps           spatial 220, object 280, goal 300, libero_10 520, libero_90 400
                    (policy steps, after the wait steps)
wait steps          10 no-op steps after each reset (objects settle), gripper open
trials per task     50, one per fixed init state
control rate        20 Hz (robosuite OSC_POSE controller)
render size         256 x 256 per camera
env seed            0: numpy's global RNG is seeded once per task (``env.seed(0)`` in
                    ``get_libero_env``); it places the task's fixtures at every reset
==================  ==========================================================

The env hands over LIBERO's raw frames and takes LIBERO-native actions; image preprocessing
and the gripper convention belong to the policy's processor (see ``sim.libero.env``).

Every result file records :meth:`LiberoProtocol.to_dict` next to the library versions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, ClassVar

from embodied.config import Rule, checked, config_from_dict, config_to_dict, validate
from embodied.errors import UnknownNameError

SUITES: tuple[str, ...] = (
    "libero_spatial",
    "libero_object",
    "libero_goal",
    "libero_10",
    "libero_90",
)
"""The LIBERO suites, in the order of the papers' tables."""

DEFAULT_MAX_STEPS: Mapping[str, int] = MappingProxyType(
    {
        "libero_spatial": 220,
        "libero_object": 280,
        "libero_goal": 300,
        "libero_10": 520,
        "libero_90": 400,
    }
)
"""Policy steps per episode by suite (the longest demo of the suite, rounded up)."""

LEGACY_KEYS: tuple[str, ...] = (
    "image_size",
    "image_preprocess",
    "image_preprocess_doc",
    "policy_image_size",
    "center_crop_scale",
    "gripper_convention",
    "gripper_convention_doc",
)
"""Protocol keys of result files written before the env handed over raw frames and took only
LIBERO-native actions (image preprocessing and gripper conversion moved to the policy's
processor); :meth:`LiberoProtocol.from_dict` reads such files and drops these keys."""


def check_suite(suite: str) -> str:
    """Return ``suite`` if it is a LIBERO suite, else raise listing the suites."""
    if suite not in SUITES:
        raise UnknownNameError(
            f"unknown LIBERO suite {suite!r}; suites: {', '.join(SUITES)}",
            fix="use one of the listed suites, e.g. libero:libero_spatial:0",
        )
    return suite


@dataclass(frozen=True)
class LiberoProtocol:
    """The LIBERO evaluation protocol (OpenVLA defaults).

    Args:
        max_steps_by_suite: Policy steps per episode per suite (wait steps not included).
        num_wait_steps: No-op steps after each reset, before the policy acts.
        trials_per_task: Episodes per task; episode ``i`` starts from init state ``i % 50``.
        control_rate_hz: Control rate of the OSC controller (Hz).
        render_size: Camera render size in pixels (square); observations carry the frames
            at this size.
        seed: Base seed of an evaluation (OpenVLA uses 7).
        env_seed: Seed of numpy's global RNG, which LIBERO uses to place the task's fixtures
            (cabinets, stoves, racks) at every reset: ~1 cm apart between episodes, up to
            ~2 cm, no rotation. The reference seeds it once per task with 0.
        reseed_on_reset: False (the reference): episode ``i`` (init state ``i``) gets the
            fixture placement of the reference's episode ``i``, the RNG state ``env_seed``
            reaches after ``i`` resets, whichever worker runs it and whatever ran before.
            True: every ``reset(seed=s)`` reseeds numpy's RNG with ``s`` (the placement then
            depends on the evaluation seed, not on the episode's place in the reference).
    """

    max_steps_by_suite: Mapping[str, int] = field(default_factory=lambda: DEFAULT_MAX_STEPS)
    num_wait_steps: int = checked(10, ge=0, fix="use the reference's 10")
    trials_per_task: int = checked(50, ge=1, fix="use the reference's 50")
    control_rate_hz: float = checked(20.0, gt=0, fix="use the OSC controller's 20 Hz")
    render_size: int = checked(256, ge=16, fix="use >= 16 pixels, e.g. the reference's 256")
    seed: int = 7
    env_seed: int = checked(0, ge=0, lt=2**32, fix="use the reference's 0 (a numpy seed)")
    reseed_on_reset: bool = False

    config_name: ClassVar[str] = "LIBERO protocol"
    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "max_steps_by_suite",
            lambda c: set(c.max_steps_by_suite) <= set(SUITES),
            lambda c: f"names unknown suites {sorted(set(c.max_steps_by_suite) - set(SUITES))}",
            f"use only the suites {list(SUITES)}",
        ),
        Rule(
            "max_steps_by_suite",
            lambda c: all(
                isinstance(v, int) and not isinstance(v, bool) and v > 0
                for v in c.max_steps_by_suite.values()
            ),
            "must map each suite to a positive int of policy steps",
            "e.g. {'libero_spatial': 220}",
        ),
    )

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "max_steps_by_suite", {**DEFAULT_MAX_STEPS, **dict(self.max_steps_by_suite)}
        )
        validate(self)
        object.__setattr__(self, "max_steps_by_suite", MappingProxyType(self.max_steps_by_suite))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle through the init arguments (mapping proxies do not pickle)."""
        kw = {f.name: getattr(self, f.name) for f in fields(self) if f.init}
        kw["max_steps_by_suite"] = dict(self.max_steps_by_suite)
        return (_rebuild, (kw,))

    def max_steps(self, suite: str) -> int:
        """Policy steps per episode for ``suite``."""
        return int(self.max_steps_by_suite[check_suite(suite)])

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return config_to_dict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LiberoProtocol:
        """Inverse of :meth:`to_dict`; also reads older result files.

        Result files written before the policy owned image preprocessing and the gripper
        convention carry :data:`LEGACY_KEYS`; they are dropped (they described conversions
        the env no longer makes).
        """
        return config_from_dict(cls, d, what="LIBERO protocol", ignore=LEGACY_KEYS)


def _rebuild(kwargs: dict[str, Any]) -> LiberoProtocol:
    return LiberoProtocol(**kwargs)
