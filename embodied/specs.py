"""Observation and action specifications with names, bounds and units.

Observations are flat dicts (see :data:`Observation`):

* ``"state"``: float32 vector whose fields are named by :attr:`ObservationSpec.state`.
* ``"image.<camera>"``: uint8 array of shape (H, W, 3), one per camera, in the row order
  its :attr:`ImageSpec.orientation` declares (:data:`IMAGE_ORIENTATIONS`).
* ``"instruction"``: the task instruction (str).

Actions are float vectors whose dims are named, bounded and carry units
(:class:`VectorSpec`). An env's gripper dim, where it has one, follows one of
:data:`GRIPPER_CONVENTIONS` (``Env.gripper_convention``).

Conventions have one owner: an env hands over its frames and takes its actions as the
simulator or robot does, and declares how; a policy declares what it expects and its processor
converts. ``Policy.check_compatible`` refuses a mismatch before the first step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from embodied.config import Rule, checked, validate
from embodied.errors import ActionError, ConfigError

Observation = dict[str, Any]
"""A flat observation dict: ``state``, ``image.<camera>`` and ``instruction``."""

IMAGE_PREFIX = "image."

IMAGE_ORIENTATIONS: Mapping[str, str] = MappingProxyType(
    {
        "upright": "row 0 is the top of the scene and column 0 its left, as a person sees it",
        "vertical_flip": "upright flipped top to bottom (row 0 is the bottom): OpenGL's "
        "read-back order, what robosuite 1.4 (IMAGE_CONVENTION 'opengl') and LIBERO render "
        "and LIBERO's demonstration files store",
        "horizontal_flip": "upright mirrored left to right (e.g. a 180-degree rotation of a "
        "vertical_flip frame, as OpenVLA's LIBERO training images are)",
        "rotate_180": "upright rotated by 180 degrees (flipped top to bottom and left to right)",
    }
)
"""Row/column orders an image may come in, by name; see :func:`upright`."""

GRIPPER_CONVENTIONS: Mapping[str, str] = MappingProxyType(
    {
        "close_positive": "gripper command in [-1, 1]: -1 opens, +1 closes (robosuite, LIBERO "
        "and LIBERO's demonstration files)",
        "open_positive": "gripper command in [0, 1]: 1 open, 0 closed (OpenVLA's RLDS / Open "
        "X-Embodiment training data; what OpenVLA outputs before any conversion)",
    }
)
"""Meanings of an action's gripper dim, by name (``None`` where an env has no gripper or a
policy does not declare one)."""

_CONVENTIONS: Mapping[str, Mapping[str, str]] = {
    "image orientation": IMAGE_ORIENTATIONS,
    "gripper convention": GRIPPER_CONVENTIONS,
}


def check_convention(kind: str, value: str | None) -> str | None:
    """Return ``value`` if it names a known convention of ``kind`` (or is None), else raise.

    Args:
        kind: ``"image orientation"`` (:data:`IMAGE_ORIENTATIONS`) or ``"gripper convention"``
            (:data:`GRIPPER_CONVENTIONS`).
        value: The declared name, or None (undeclared / not applicable).

    Raises:
        ConfigError: an unknown name, listing the known ones.
    """
    known = _CONVENTIONS[kind]
    if value is not None and value not in known:
        raise ConfigError(
            f"unknown {kind} {value!r}; options: {', '.join(known)}",
            fix=f"declare one of the {kind}s listed",
        )
    return value


def upright(image: np.ndarray, orientation: str) -> np.ndarray:
    """The upright view of a frame (H, W, C) or clip (..., H, W, C) in ``orientation``.

    For consumers that need upright frames whatever the env renders (videos, judges). Each
    orientation is its own inverse, so ``upright(frame, o)`` also turns an upright frame into
    orientation ``o``.

    Returns:
        A C-contiguous array (``image`` itself when it is upright and contiguous).
    """
    check_convention("image orientation", orientation)
    img = np.asarray(image)
    if img.ndim < 3:
        raise ConfigError(f"upright() needs (..., H, W, C) images, got shape {img.shape}")
    if orientation in ("vertical_flip", "rotate_180"):
        img = img[..., ::-1, :, :]
    if orientation in ("horizontal_flip", "rotate_180"):
        img = img[..., :, ::-1, :]
    return np.ascontiguousarray(img)


def image_key(camera: str) -> str:
    """The observation key of ``camera``'s image, e.g. ``image.front``."""
    return f"{IMAGE_PREFIX}{camera}"


def _one_per_name(label: str) -> Rule:
    """The rule that the field ``label`` of a :class:`VectorSpec` has one entry per name."""
    return Rule(
        label,
        lambda c: len(getattr(c, label)) == len(c.names),
        lambda c: f"has {len(getattr(c, label))} entries but names has {len(c.names)}",
        "give one entry per named dim",
    )


@dataclass(frozen=True)
class VectorSpec:
    """A float vector with named, bounded dims.

    Args:
        names: One name per dim, e.g. ``("dx", "dy")``.
        low: Lower bound per dim (``-inf`` for unbounded).
        high: Upper bound per dim (``+inf`` for unbounded).
        units: One unit per dim, e.g. ``("m/s", "m/s")``; ``"1"`` for dimensionless.
    """

    names: tuple[str, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]
    units: tuple[str, ...]

    rules: ClassVar[tuple[Rule, ...]] = (
        *(_one_per_name(label) for label in ("low", "high", "units")),
        Rule(
            "names",
            lambda c: len(set(c.names)) == len(c.names),
            "are not unique",
            "name each dim once",
        ),
        Rule(
            "low",
            lambda c: all(lo <= hi for lo, hi in zip(c.low, c.high, strict=True)),
            lambda c: (
                f"is above high={c.high} (low > high) for dims "
                f"{[n for n, lo, hi in zip(c.names, c.low, c.high, strict=True) if not lo <= hi]}"
            ),
            "give each dim low <= high",
        ),
    )

    def __post_init__(self) -> None:
        validate(self)

    @classmethod
    def uniform(cls, names: Sequence[str], low: float, high: float, unit: str) -> VectorSpec:
        """A spec whose dims share one bound pair and unit."""
        n = len(names)
        return cls(tuple(names), (low,) * n, (high,) * n, (unit,) * n)

    @property
    def dim(self) -> int:
        """Number of dims."""
        return len(self.names)

    @property
    def low_array(self) -> np.ndarray:
        """Lower bounds as float64 array."""
        return np.asarray(self.low, dtype=np.float64)

    @property
    def high_array(self) -> np.ndarray:
        """Upper bounds as float64 array."""
        return np.asarray(self.high, dtype=np.float64)

    def index(self, name: str) -> int:
        """Position of the dim called ``name``."""
        if name not in self.names:
            raise ConfigError(f"no dim named {name!r}; dims: {self.names!r}")
        return self.names.index(name)

    def validate(self, value: Any, what: str = "action") -> np.ndarray:
        """Check shape and finiteness; return a float64 copy.

        Raises:
            ActionError: wrong shape, or NaN/inf entries (naming the dims).
        """
        arr = np.asarray(value, dtype=np.float64)
        if arr.shape != (self.dim,):
            raise ActionError(
                f"{what} has shape {arr.shape}, expected ({self.dim},) for dims {self.names}",
                fix=f"return one {self.dim}-dim vector per step",
            )
        finite = np.isfinite(arr)
        if not finite.all():
            bad = {self.names[i]: float(arr[i]) for i in np.flatnonzero(~finite)}
            raise ActionError(f"{what} has non-finite values {bad}", fix="check the policy output")
        return arr.copy()

    def clip(self, value: np.ndarray) -> np.ndarray:
        """Clip ``value`` into the bounds."""
        return np.clip(value, self.low_array, self.high_array)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {
            "names": list(self.names),
            "low": [float(x) for x in self.low],
            "high": [float(x) for x in self.high],
            "units": list(self.units),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> VectorSpec:
        """Inverse of :meth:`to_dict`."""
        return cls(tuple(d["names"]), tuple(d["low"]), tuple(d["high"]), tuple(d["units"]))


@dataclass(frozen=True)
class ImageSpec:
    """An RGB camera image: uint8 array of shape (height, width, 3).

    Args:
        height: Rows (pixels).
        width: Columns (pixels).
        orientation: Row/column order of the frames (:data:`IMAGE_ORIENTATIONS`); envs hand
            over frames as their renderer or camera delivers them and say so here.
    """

    height: int = checked(gt=0, fix="give the image size in pixels, e.g. 64")
    width: int = checked(gt=0, fix="give the image size in pixels, e.g. 64")
    orientation: str = checked("upright", choices=IMAGE_ORIENTATIONS)

    def __post_init__(self) -> None:
        validate(self)

    @property
    def shape(self) -> tuple[int, int, int]:
        """(H, W, 3)."""
        return (self.height, self.width, 3)


@dataclass(frozen=True)
class ObservationSpec:
    """What an env observes.

    Args:
        state: Named fields of the ``state`` vector with units.
        cameras: Camera name -> image spec; each appears as ``image.<camera>``.
    """

    state: VectorSpec
    cameras: Mapping[str, ImageSpec] = field(default_factory=dict)

    @property
    def image_keys(self) -> list[str]:
        """The ``image.<camera>`` keys, in camera order."""
        return [image_key(c) for c in self.cameras]

    def validate(self, obs: Observation) -> None:
        """Check that ``obs`` matches this spec (keys, shapes, dtypes)."""
        state = obs.get("state")
        shape = None if state is None else np.shape(state)
        if shape != (self.state.dim,):
            raise ConfigError(f"observation state has shape {shape}, expected ({self.state.dim},)")
        for cam, spec in self.cameras.items():
            img = obs.get(image_key(cam))
            if img is None:
                raise ConfigError(f"observation lacks {image_key(cam)!r}; keys: {sorted(obs)}")
            if img.shape != spec.shape or img.dtype != np.uint8:
                raise ConfigError(
                    f"{image_key(cam)} is {img.dtype}{img.shape}, expected uint8{spec.shape}"
                )
        if not isinstance(obs.get("instruction", ""), str):
            raise ConfigError("observation 'instruction' must be a str")

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {
            "state": self.state.to_dict(),
            "cameras": {c: [s.height, s.width] for c, s in self.cameras.items()},
            "orientation": {c: s.orientation for c, s in self.cameras.items()},
        }
