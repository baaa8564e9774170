"""The LIBERO evaluation protocol as one frozen, validated, serialisable object.

Defaults follow the OpenVLA LIBERO evaluation (``experiments/robot/libero/run_libero_eval.py``):

==================  ==========================================================
max steps           spatial 220, object 280, goal 300, libero_10 520, libero_90 400
                    (policy steps, after the wait steps)
wait steps          10 no-op steps after each reset (objects settle), gripper open
trials per task     50, one per fixed init state
control rate        20 Hz (robosuite OSC_POSE controller)
render size         256 x 256 per camera
preprocessing       ``none`` (LIBERO's stored pixels) or ``openvla`` (rotate 180 degrees,
                    resize to 224, optional center crop of ``center_crop_scale`` of the area,
                    resized back to 224)
gripper             ``libero`` or ``openvla`` convention, see :data:`GRIPPER_CONVENTIONS`
==================  ==========================================================

Every result file records :meth:`LiberoProtocol.to_dict` next to the library versions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from embodied.config import config_from_dict, config_to_dict
from embodied.errors import ConfigError, UnknownNameError

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

GRIPPER_CONVENTIONS: Mapping[str, str] = MappingProxyType(
    {
        "libero": "action[6] in [-1, 1]: -1 opens, +1 closes (robosuite/LIBERO native, as in "
        "LIBERO's demo files)",
        "openvla": "action[6] in [0, 1]: 1 open, 0 closed (OpenVLA's RLDS LIBERO data); sent to "
        "the sim as -sign(2 * g - 1), i.e. binarized and inverted like OpenVLA's eval",
    }
)
"""Gripper conventions a policy may speak; the env maps them to LIBERO's native one."""

IMAGE_PREPROCESSING: Mapping[str, str] = MappingProxyType(
    {
        "none": "LIBERO's stored pixels at render_size (upside down, as in the demo files)",
        "openvla": "rotate 180 degrees, resize to policy_image_size (Lanczos), center-crop "
        "center_crop_scale of the area and resize back (OpenVLA's LIBERO eval)",
    }
)
"""Image preprocessing options applied by the env before a policy sees the images."""


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
        render_size: Camera render size in pixels (square).
        image_preprocess: ``none`` or ``openvla`` (see :data:`IMAGE_PREPROCESSING`).
        policy_image_size: Output size (pixels, square) of ``openvla`` preprocessing.
        center_crop_scale: Area fraction kept by the center crop (1.0: no crop; OpenVLA
            policies trained with random crops use 0.9).
        gripper_convention: ``libero`` or ``openvla`` (see :data:`GRIPPER_CONVENTIONS`).
        seed: Base seed of an evaluation (OpenVLA uses 7).

    Derived:
        image_size: Pixel size (square) of the images the policy receives.
    """

    max_steps_by_suite: Mapping[str, int] = field(default_factory=lambda: DEFAULT_MAX_STEPS)
    num_wait_steps: int = 10
    trials_per_task: int = 50
    control_rate_hz: float = 20.0
    render_size: int = 256
    image_preprocess: str = "none"
    policy_image_size: int = 224
    center_crop_scale: float = 1.0
    gripper_convention: str = "libero"
    seed: int = 7
    image_size: int = field(init=False)

    def __post_init__(self) -> None:
        steps = dict(self.max_steps_by_suite)
        unknown = sorted(set(steps) - set(SUITES))
        if unknown:
            raise ConfigError(
                f"max_steps_by_suite names unknown suites {unknown}; suites: {list(SUITES)}"
            )
        merged = {**DEFAULT_MAX_STEPS, **steps}
        bad = {k: v for k, v in merged.items() if not (isinstance(v, int) and v > 0)}
        if bad:
            raise ConfigError(f"max_steps_by_suite must be positive ints, got {bad}")
        object.__setattr__(self, "max_steps_by_suite", MappingProxyType(merged))
        if self.num_wait_steps < 0:
            raise ConfigError(f"num_wait_steps must be >= 0, got {self.num_wait_steps}")
        if self.trials_per_task <= 0:
            raise ConfigError(f"trials_per_task must be positive, got {self.trials_per_task}")
        if not self.control_rate_hz > 0:
            raise ConfigError(f"control_rate_hz must be positive, got {self.control_rate_hz}")
        if self.render_size < 16 or self.policy_image_size < 16:
            raise ConfigError(
                f"render_size ({self.render_size}) and policy_image_size "
                f"({self.policy_image_size}) must be >= 16 pixels"
            )
        if self.image_preprocess not in IMAGE_PREPROCESSING:
            raise ConfigError(
                f"image_preprocess {self.image_preprocess!r} unknown; options: "
                f"{list(IMAGE_PREPROCESSING)}"
            )
        if not 0.0 < self.center_crop_scale <= 1.0:
            raise ConfigError(
                f"center_crop_scale must be in (0, 1], got {self.center_crop_scale}",
                fix="use 0.9 for OpenVLA policies trained with random crops, 1.0 for none",
            )
        if self.center_crop_scale < 1.0 and self.image_preprocess == "none":
            raise ConfigError(
                f"center_crop_scale={self.center_crop_scale} needs image_preprocess='openvla'"
            )
        if self.gripper_convention not in GRIPPER_CONVENTIONS:
            raise ConfigError(
                f"gripper_convention {self.gripper_convention!r} unknown; options: "
                f"{list(GRIPPER_CONVENTIONS)}"
            )
        size = self.policy_image_size if self.image_preprocess == "openvla" else self.render_size
        object.__setattr__(self, "image_size", size)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle through the init arguments (mapping proxies do not pickle)."""
        kw = {f.name: getattr(self, f.name) for f in fields(self) if f.init}
        kw["max_steps_by_suite"] = dict(self.max_steps_by_suite)
        return (_rebuild, (kw,))

    @classmethod
    def openvla(cls, center_crop: bool = True, **overrides: Any) -> LiberoProtocol:
        """The protocol for OpenVLA-style policies: rotated 224 px images, [0, 1] gripper."""
        kw: dict[str, Any] = {
            "image_preprocess": "openvla",
            "gripper_convention": "openvla",
            "center_crop_scale": 0.9 if center_crop else 1.0,
        }
        kw.update(overrides)
        return cls(**kw)

    def max_steps(self, suite: str) -> int:
        """Policy steps per episode for ``suite``."""
        return int(self.max_steps_by_suite[check_suite(suite)])

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (with the derived fields and the convention texts)."""
        d = config_to_dict(self)
        d["image_size"] = self.image_size
        d["gripper_convention_doc"] = GRIPPER_CONVENTIONS[self.gripper_convention]
        d["image_preprocess_doc"] = IMAGE_PREPROCESSING[self.image_preprocess]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LiberoProtocol:
        """Inverse of :meth:`to_dict` (derived and doc fields are ignored)."""
        return config_from_dict(
            cls,
            d,
            what="LIBERO protocol",
            ignore=("image_size", "gripper_convention_doc", "image_preprocess_doc"),
        )


def _rebuild(kwargs: dict[str, Any]) -> LiberoProtocol:
    return LiberoProtocol(**kwargs)
