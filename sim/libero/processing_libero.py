"""Image preprocessing and gripper-convention mapping of the LIBERO protocol."""

from __future__ import annotations

import math

import numpy as np

from embodied.errors import ConfigError


def rotate_180(image: np.ndarray) -> np.ndarray:
    """Rotate an (H, W, 3) image by 180 degrees (OpenVLA's ``img[::-1, ::-1]``)."""
    return np.ascontiguousarray(image[::-1, ::-1])


def resize(image: np.ndarray, size: int) -> np.ndarray:
    """Resize a uint8 (H, W, 3) image to (size, size, 3) with Lanczos filtering."""
    if image.shape[0] == size and image.shape[1] == size:
        return image
    from PIL import Image

    return np.asarray(Image.fromarray(image).resize((size, size), Image.Resampling.LANCZOS))


def center_crop(image: np.ndarray, scale: float) -> np.ndarray:
    """Keep the central ``scale`` fraction of the area (side ``sqrt(scale)``), unresized."""
    if not 0.0 < scale <= 1.0:
        raise ConfigError(f"center crop scale must be in (0, 1], got {scale}")
    if scale == 1.0:
        return image
    h, w = image.shape[:2]
    side = math.sqrt(scale)
    ch, cw = round(h * side), round(w * side)
    top, left = (h - ch) // 2, (w - cw) // 2
    return image[top : top + ch, left : left + cw]


def openvla_image(image: np.ndarray, size: int = 224, crop_scale: float = 1.0) -> np.ndarray:
    """OpenVLA's LIBERO preprocessing: rotate 180, resize, center-crop, resize back.

    Args:
        image: uint8 (H, W, 3) render in LIBERO's stored orientation.
        size: Output side in pixels (224 for OpenVLA).
        crop_scale: Area fraction kept by the center crop (0.9 for policies trained with
            random crops, 1.0 for none).
    """
    out = resize(rotate_180(image), size)
    if crop_scale < 1.0:
        out = resize(np.ascontiguousarray(center_crop(out, crop_scale)), size)
    return out


def gripper_to_libero(value: float, convention: str) -> float:
    """Map a policy's gripper command to LIBERO's native one (-1 open, +1 close).

    Args:
        value: The policy's gripper value.
        convention: ``libero`` (identity) or ``openvla`` (1 open, 0 closed; binarized and
            inverted exactly like OpenVLA's ``normalize_gripper_action`` +
            ``invert_gripper_action``: ``-sign(2 * value - 1)``).
    """
    if convention == "libero":
        return float(value)
    if convention == "openvla":
        return float(-np.sign(2.0 * float(value) - 1.0))
    raise ConfigError(f"unknown gripper convention {convention!r}; options: libero, openvla")


def gripper_from_libero(value: float, convention: str) -> float:
    """Map LIBERO's native gripper command (-1 open, +1 close) to ``convention``.

    Used to convert LIBERO demos for policies trained in the ``openvla`` convention
    (-1 -> 1.0 open, +1 -> 0.0 closed).
    """
    if convention == "libero":
        return float(value)
    if convention == "openvla":
        return float((1.0 - float(value)) / 2.0)
    raise ConfigError(f"unknown gripper convention {convention!r}; options: libero, openvla")
