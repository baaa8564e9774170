"""OpenVLA's input/output interface: prompt, image preprocessing, action tokens, statistics.

* Prompt: ``"In: What action should the robot take to {instruction}?\\nOut:"``.
* Images: per ``config.image_pipeline``, either an optional center crop (area fraction) and
  a bicubic resize to the model's square size (``resize``), or OpenVLA's LIBERO evaluation
  pipeline on LIBERO's raw frames (``libero_reference``: rotate 180 degrees, JPEG round
  trip, TensorFlow-exact lanczos3 resize and center crop, see :func:`openvla_libero_image`);
  then normalised once per backbone (DINOv2, SigLIP) and stacked channel-wise into
  ``(B, 6, H, W)``.
* Actions: clipped to [-1, 1], digitised into ``n_bins`` uniform edges and mapped onto the
  last ids of the text vocabulary (``token = vocab_size - bin``); decoding returns bin
  centers. Un-normalisation maps [-1, 1] onto [q01, q99] where ``mask`` is True and leaves
  the other dims (the gripper) untouched.
"""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import simplejpeg
import torch
from PIL import Image

from embodied.errors import ConfigError
from embodied.tokenizers import build_word_tokenizer
from policies.openvla.configuration_openvla import OpenVLAConfig

PROMPT_TEMPLATE = "In: What action should the robot take to {instruction}?\nOut:"


def build_prompt(instruction: str) -> str:
    """OpenVLA's prompt for ``instruction`` (lower-cased, as in OpenVLA's evaluation code)."""
    text = instruction.strip().lower()
    if not text:
        raise ConfigError(
            "empty instruction", fix="pass the task instruction, e.g. 'pick up the cube'"
        )
    return PROMPT_TEMPLATE.format(instruction=text)


class ActionTokenizer:
    """Uniform binning of normalised actions onto the last ``n_bins`` text-vocabulary ids.

    Args:
        vocab_size: Text vocabulary size without padding rows (Llama-2: 32000).
        n_bins: Number of bin edges on [min_action, max_action] (OpenVLA: 256).
        min_action: Lower clip bound of normalised actions.
        max_action: Upper clip bound.
    """

    def __init__(
        self, vocab_size: int, n_bins: int = 256, min_action: float = -1.0, max_action: float = 1.0
    ) -> None:
        if vocab_size <= n_bins:
            raise ConfigError(f"vocab_size {vocab_size} must exceed n_bins {n_bins}")
        self.vocab_size = int(vocab_size)
        self.n_bins = int(n_bins)
        self.min_action, self.max_action = float(min_action), float(max_action)
        self.bins = np.linspace(min_action, max_action, self.n_bins)
        self.bin_centers = (self.bins[:-1] + self.bins[1:]) / 2.0

    @property
    def first_id(self) -> int:
        """Smallest action token id (``vocab_size - n_bins``)."""
        return self.vocab_size - self.n_bins

    def encode(self, actions: np.ndarray) -> np.ndarray:
        """Normalised actions (..., D) in [-1, 1] -> token ids (..., D) (int64)."""
        a = np.clip(np.asarray(actions, dtype=np.float64), self.min_action, self.max_action)
        return (self.vocab_size - np.digitize(a, self.bins)).astype(np.int64)

    def decode(self, token_ids: np.ndarray) -> np.ndarray:
        """Token ids (..., D) -> normalised actions (bin centers), clipping stray ids into range."""
        d = self.vocab_size - np.asarray(token_ids, dtype=np.int64)
        d = np.clip(d - 1, 0, self.bin_centers.shape[0] - 1)
        return self.bin_centers[d]

    def is_action_token(self, token_ids: np.ndarray) -> np.ndarray:
        """Mask of ids inside the action range."""
        ids = np.asarray(token_ids)
        return (ids >= self.first_id) & (ids < self.vocab_size)


def action_stats(config: OpenVLAConfig, unnorm_key: str | None) -> dict[str, np.ndarray]:
    """q01, q99 and mask (float64/bool arrays) of dataset ``unnorm_key``."""
    key = config.resolve_unnorm_key(unnorm_key)
    st = config.norm_stats[key]["action"]
    q01 = np.asarray(st["q01"], dtype=np.float64)
    q99 = np.asarray(st["q99"], dtype=np.float64)
    mask = np.asarray(st.get("mask", np.ones_like(q01, dtype=bool)), dtype=bool)
    return {"q01": q01, "q99": q99, "mask": mask}


def unnormalize(actions: np.ndarray, stats: dict[str, np.ndarray]) -> np.ndarray:
    """[-1, 1] -> env units: ``0.5 (a + 1)(q99 - q01) + q01`` where ``mask``, else unchanged."""
    a = np.asarray(actions, dtype=np.float64)
    lo, hi = stats["q01"], stats["q99"]
    return np.where(stats["mask"], 0.5 * (a + 1.0) * (hi - lo) + lo, a)


ACTION_CONVENTIONS: dict[str, str] = {
    "openvla": "the decoded actions as they are: gripper in [0, 1], 1 open, 0 closed (released "
    "OpenVLA checkpoints, Open X-Embodiment data); declares gripper 'open_positive'",
    "libero": "OpenVLA's LIBERO evaluation post-processing (libero_gripper_action): gripper "
    "binarized and inverted to -1 open, +1 close; declares gripper 'close_positive' (LIBERO "
    "fine-tuned checkpoints on LIBERO envs)",
    "as_trained": "the decoded actions as they are, no conventions declared (models trained on "
    "an env's own frames and actions, e.g. by `embodied train vla`)",
}
"""What :meth:`OpenVLAProcessor.postprocess_actions` returns, by ``action_convention``."""

_GRIPPER_OF: dict[str, str | None] = {
    "openvla": "open_positive",
    "libero": "close_positive",
    "as_trained": None,
}


def normalize_gripper_action(action: np.ndarray, binarize: bool = True) -> np.ndarray:
    """OpenVLA's ``robot_utils.normalize_gripper_action``: last dim [0, 1] -> [-1, +1].

    ``2 * g - 1``, then ``sign`` when ``binarize`` (0.5 maps to 0). Returns a copy.
    """
    out = np.array(action, dtype=np.float64, copy=True)
    out[..., -1] = 2.0 * (out[..., -1] - 0.0) / (1.0 - 0.0) - 1.0
    if binarize:
        out[..., -1] = np.sign(out[..., -1])
    return out


def invert_gripper_action(action: np.ndarray) -> np.ndarray:
    """OpenVLA's ``robot_utils.invert_gripper_action``: last dim times -1. Returns a copy."""
    out = np.array(action, dtype=np.float64, copy=True)
    out[..., -1] = out[..., -1] * -1.0
    return out


def libero_gripper_action(action: np.ndarray) -> np.ndarray:
    """OpenVLA's LIBERO post-processing of a model action (``run_libero_eval.py``).

    ``normalize_gripper_action(binarize=True)`` then ``invert_gripper_action``: the model's
    gripper (1 open, 0 closed) becomes LIBERO's (-1 open, +1 close); the arm dims pass.
    """
    return invert_gripper_action(normalize_gripper_action(action, binarize=True))


def normalize(actions: np.ndarray, stats: dict[str, np.ndarray]) -> np.ndarray:
    """Env units -> [-1, 1] (inverse of :func:`unnormalize`, clipped), masked dims unchanged."""
    a = np.asarray(actions, dtype=np.float64)
    lo, hi = stats["q01"], stats["q99"]
    span = np.where(hi - lo > 1e-8, hi - lo, 1.0)
    return np.where(stats["mask"], np.clip(2.0 * (a - lo) / span - 1.0, -1.0, 1.0), a)


ACTION_BOUNDS = ("q99", "minmax")
"""How actions map onto [-1, 1]: OpenVLA's default ``BOUNDS_Q99`` or its ``BOUNDS`` (min/max)."""


def compute_norm_stats(
    actions: np.ndarray, mask: Sequence[bool] | None = None, bounds: str = "q99"
) -> dict[str, Any]:
    """OpenVLA-style statistics of (N, D) actions: mean, std, min, max, q01, q99, mask.

    Args:
        actions: (N, D) actions in env units.
        mask: Which dims are normalised (False = passed through, e.g. the gripper).
        bounds: ``q99`` (OpenVLA's ``BOUNDS_Q99``: the 1st and 99th percentiles, the rarest
            largest actions clip) or ``minmax`` (its ``BOUNDS``: nothing clips). Under
            ``minmax`` the ``q01``/``q99`` fields, the ones OpenVLA's inference reads, hold the
            min and max, and ``bounds`` says so.

    Raises:
        ConfigError: Not (N, D) actions with N > 0, or an unknown ``bounds``.
    """
    a = np.asarray(actions, dtype=np.float64)
    if a.ndim != 2 or len(a) == 0:
        raise ConfigError(f"need (N, D) actions with N > 0, got shape {a.shape}")
    if bounds not in ACTION_BOUNDS:
        raise ConfigError(
            f"action bounds {bounds!r} is not one of {list(ACTION_BOUNDS)}",
            fix="use q99 (OpenVLA's default) or minmax",
        )
    m = np.ones(a.shape[1], dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    lo, hi = (a.min(0), a.max(0)) if bounds == "minmax" else np.quantile(a, [0.01, 0.99], axis=0)
    return {
        "action": {
            "mean": a.mean(0).tolist(),
            "std": a.std(0).tolist(),
            "min": a.min(0).tolist(),
            "max": a.max(0).tolist(),
            "q01": lo.tolist(),
            "q99": hi.tolist(),
            "mask": m.tolist(),
            "bounds": bounds,
        },
        "num_transitions": len(a),
    }


# ----------------------------------------------------------------------------- images
# OpenVLA's LIBERO image pipeline, reproduced without TensorFlow. The reference is
# openvla/openvla ``experiments/robot/libero/libero_utils.py::get_libero_image`` /
# ``resize_image`` and ``experiments/robot/openvla_utils.py::get_vla_action`` /
# ``crop_and_resize``; each function below names the TensorFlow op it reproduces. All float
# arithmetic is float32 in TensorFlow's order of operations, so the outputs match bit for bit
# (tests/openvla/test_openvla_image_reference.py checks this against TensorFlow's outputs).

JPEG_QUALITY = 95
"""``tf.image.encode_jpeg``'s default quality (with 4:2:0 chroma subsampling, 300 dpi)."""

_LANCZOS_RADIUS = 3.0
_TF_PI = np.float32(3.14159265359)  # TF sampling_kernels.h: constexpr float kPI


def _check_rgb_u8(image: np.ndarray, what: str) -> np.ndarray:
    img = np.asarray(image)
    if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
        raise ConfigError(
            f"{what} must be uint8 (H, W, 3), got {img.dtype}{img.shape}",
            fix="pass the camera frame from the observation dict",
        )
    return img


def jpeg_round_trip(image: np.ndarray) -> np.ndarray:
    """``tf.io.decode_image(tf.image.encode_jpeg(image), dtype=tf.uint8)`` without TensorFlow.

    Encoding: Pillow (libjpeg-turbo) at quality 95, 4:2:0 chroma subsampling, baseline,
    standard Huffman tables, 300 dpi: byte-identical to ``tf.image.encode_jpeg``'s defaults.
    Decoding: TensorFlow decodes with libjpeg's fast integer IDCT (``JDCT_IFAST``) and fancy
    chroma upsampling. Pillow cannot select that IDCT, and its accurate one is off by up to
    16 levels (1.0-1.3 on average, still after the resize; measured on LIBERO frames), so the
    decoder is ``simplejpeg`` (libjpeg-turbo) with ``fastdct=True, fastupsample=False``, which
    reproduces TensorFlow's pixels exactly.

    Args:
        image: uint8 (H, W, 3) RGB.

    Returns:
        uint8 (H, W, 3), the image after one JPEG encode/decode.
    """
    img = np.ascontiguousarray(_check_rgb_u8(image, "image"))
    buf = io.BytesIO()
    Image.fromarray(img).save(
        buf, "JPEG", quality=JPEG_QUALITY, subsampling="4:2:0", dpi=(300, 300)
    )
    out = simplejpeg.decode_jpeg(buf.getvalue(), colorspace="RGB", fastdct=True, fastupsample=False)
    return np.asarray(out, dtype=np.uint8)


@functools.lru_cache(maxsize=16)
def _lanczos3_spans(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Tap starts (out,) and float32 weights (out, taps) of TF's antialiased lanczos3 resize.

    TensorFlow's ``ScaleAndTranslate`` op (``scale_and_translate_op.cc::ComputeSpansCore``,
    kernel ``sampling_kernels.h::LanczosKernelFunc``) with scale ``out/in`` and no
    translation, in float32 as there: when downsampling the kernel is widened by ``in/out``
    (``kernel_scale``); each output's weights are normalised to sum 1.
    """
    f32 = np.float32
    scale = f32(out_size) / f32(in_size)
    inv_scale = f32(1.0 / float(scale))
    kernel_scale = max(inv_scale, f32(1.0))  # antialias=True
    one_over_kernel_scale = f32(1.0) / kernel_scale
    reach = f32(_LANCZOS_RADIUS) * kernel_scale
    taps = min(2 * math.ceil(float(reach)) + 1, in_size)
    starts = np.zeros(out_size, dtype=np.int64)
    weights = np.zeros((out_size, taps), dtype=np.float32)
    for x in range(out_size):
        sample = (f32(x) + f32(0.5)) * inv_scale  # + inv_translate (= -0.0)
        if sample < 0 or sample > in_size:
            continue
        start = min(max(math.ceil(float(sample - reach - f32(0.5))), 0), in_size - 1)
        end = min(max(math.floor(float(sample + reach - f32(0.5))), 0), in_size - 1) + 1
        pos = np.arange(start, end, dtype=np.float32) + f32(0.5) - sample
        t = np.abs(pos * one_over_kernel_scale)
        # sinf is correctly rounded in glibc; float64 sin rounded to float32 gives the same.
        a = np.sin((_TF_PI * t).astype(np.float64)).astype(np.float32)
        b = np.sin((_TF_PI * t / f32(_LANCZOS_RADIUS)).astype(np.float64)).astype(np.float32)
        k = f32(_LANCZOS_RADIUS) * a * b / (_TF_PI * _TF_PI * t * t)
        k = np.where(t <= 1e-3, f32(1.0), np.where(t > f32(_LANCZOS_RADIUS), f32(0.0), k))
        total = f32(0.0)
        for w in k.astype(np.float32):  # sequential float32 sum, as in TF
            total = f32(total + w)
        if abs(float(total)) >= 1000.0 * float(np.finfo(np.float32).tiny):
            weights[x, : end - start] = k.astype(np.float32) * (f32(1.0) / total)
        starts[x] = start
    starts.setflags(write=False)  # cached: shared by every call
    weights.setflags(write=False)
    return starts, weights


def _gather_axis(
    image: np.ndarray, starts: np.ndarray, weights: np.ndarray, axis: int
) -> np.ndarray:
    """``out[i] = sum_j w[i, j] * image[starts[i] + j]`` along ``axis``, summed in tap order."""
    n = image.shape[axis]
    src = np.moveaxis(image, axis, 0).astype(np.float32, copy=False)
    out = np.zeros((len(starts), *src.shape[1:]), dtype=np.float32)
    shape = (len(starts),) + (1,) * (src.ndim - 1)
    for j in range(weights.shape[1]):
        idx = np.minimum(starts + j, n - 1)  # taps past the edge carry weight 0
        w = weights[:, j].reshape(shape)
        out += w * src[idx]
    return np.moveaxis(out, 0, axis)


def resize_lanczos3(image: np.ndarray, size: int) -> np.ndarray:
    """``tf.image.resize(image, (size, size), method="lanczos3", antialias=True)``.

    Separable: rows first, then columns, as TensorFlow's ``GatherRows``/``GatherColumns``.

    Args:
        image: (H, W, C) array (uint8 or float).
        size: Output side.

    Returns:
        float32 (size, size, C), unrounded (TensorFlow returns float32 too).
    """
    img = np.asarray(image)
    rows = _lanczos3_spans(img.shape[0], size)
    cols = _lanczos3_spans(img.shape[1], size)
    tmp = _gather_axis(img, *rows, axis=0)
    return _gather_axis(tmp, *cols, axis=1)


def crop_and_resize_center(image: np.ndarray, crop_area: float, size: int) -> np.ndarray:
    """OpenVLA's ``crop_and_resize(image, crop_area, 1)``: a centred ``tf.image.crop_and_resize``.

    The box has side ``sqrt(crop_area)`` of the image in normalised coordinates (float32),
    sampled bilinearly onto ``size x size`` points spanning the box edge to edge
    (TensorFlow's ``crop_and_resize_op.cc``: ``in_y = y1 * (H - 1) + y * height_scale``).

    Args:
        image: float32 (H, W, C).
        crop_area: Area fraction kept (0.9 in OpenVLA's LIBERO evaluation).
        size: Output side (OpenVLA: 224).

    Returns:
        float32 (size, size, C).
    """
    f32 = np.float32
    img = np.asarray(image, dtype=np.float32)
    side = np.clip(np.sqrt(f32(crop_area)), f32(0.0), f32(1.0))
    lo = (f32(1.0) - side) / f32(2.0)
    hi = lo + side

    def axis_coords(n_in: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        if size > 1:
            step = (hi - lo) * f32(n_in - 1) / f32(size - 1)
            pos = lo * f32(n_in - 1) + np.arange(size, dtype=np.float32) * step
        else:
            pos = np.full(1, f32(0.5) * (lo + hi) * f32(n_in - 1), dtype=np.float32)
        valid = (pos >= 0) & (pos <= n_in - 1)
        p = np.clip(pos, 0, n_in - 1)
        a, b = np.floor(p).astype(np.int64), np.ceil(p).astype(np.int64)
        return a, b, (pos - a).astype(np.float32), valid

    ty, by, ly, vy = axis_coords(img.shape[0])
    lx, rx, lxw, vx = axis_coords(img.shape[1])
    wx = lxw[None, :, None]
    top = img[ty][:, lx] + (img[ty][:, rx] - img[ty][:, lx]) * wx
    bottom = img[by][:, lx] + (img[by][:, rx] - img[by][:, lx]) * wx
    out = top + (bottom - top) * ly[:, None, None]
    out[~vy] = 0.0  # extrapolation_value
    out[:, ~vx] = 0.0
    return out.astype(np.float32, copy=False)


def uint8_to_float(image: np.ndarray) -> np.ndarray:
    """``tf.image.convert_image_dtype(image, tf.float32)`` for uint8: ``x * float32(1/255)``."""
    return np.asarray(image).astype(np.float32) * np.float32(1.0 / 255.0)


def float_to_uint8(image: np.ndarray) -> np.ndarray:
    """``tf.image.convert_image_dtype(image, tf.uint8, saturate=True)``.

    TensorFlow multiplies by ``255.5`` (not 255) and truncates, after clipping to [0, 255].
    """
    scaled = np.asarray(image, dtype=np.float32) * np.float32(255.5)
    return np.clip(scaled, 0.0, 255.0).astype(np.uint8)


def libero_reference_resize(image: np.ndarray, size: int = 224) -> np.ndarray:
    """OpenVLA's ``resize_image``: JPEG round trip, lanczos3 resize, round, clip (uint8)."""
    img = jpeg_round_trip(image)
    out = resize_lanczos3(img, size)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)  # tf.round: half to even


def libero_reference_crop(image: np.ndarray, crop_area: float = 0.9, size: int = 224) -> np.ndarray:
    """``get_vla_action``'s center crop: to float, ``crop_and_resize``, clip, back to uint8."""
    out = crop_and_resize_center(uint8_to_float(_check_rgb_u8(image, "image")), crop_area, size)
    return float_to_uint8(np.clip(out, 0.0, 1.0))


def openvla_libero_image(
    raw_frame: np.ndarray, *, center_crop: bool, crop_area: float = 0.9, size: int = 224
) -> np.ndarray:
    """OpenVLA's LIBERO evaluation image from LIBERO's raw ``agentview_image``.

    ``run_libero_eval.py``: ``get_libero_image`` (rotate 180 degrees, JPEG round trip,
    lanczos3 antialiased resize to ``size``), then ``get_vla_action(center_crop=...)``
    (centred crop of ``crop_area`` of the area, bilinear resize back to ``size``). The HF
    processor's own resize is a no-op at ``size``, so this is the image the model sees.

    Args:
        raw_frame: uint8 (H, W, 3) as LIBERO's ``OffScreenRenderEnv`` returns it (upside down).
        center_crop: Apply the crop (LIBERO fine-tuned checkpoints: True).
        crop_area: Area fraction kept by the crop.
        size: Output side.

    Returns:
        uint8 (size, size, 3).
    """
    img = _check_rgb_u8(raw_frame, "raw_frame")[::-1, ::-1]  # rotate 180 degrees
    out = libero_reference_resize(img, size)
    if center_crop:
        out = libero_reference_crop(out, crop_area, size)
    return out


class ImageProcessor:
    """Camera frames -> ``size x size`` uint8 images -> per-backbone normalised pixel values.

    ``config.image_pipeline`` picks the first step (:meth:`prepare`):

    * ``resize``: optional center crop (``crop_area``) + bicubic PIL resize, for any env.
    * ``libero_reference``: :func:`openvla_libero_image` on LIBERO's raw (upside-down)
      frames, OpenVLA's LIBERO evaluation preprocessing reproduced exactly.

    The second step is the Prismatic HF processor's: to [0, 1], normalised per backbone (its
    resize is a no-op on images already at ``size``).

    Args:
        config: Supplies ``image_size``, ``image_pipeline``, ``center_crop``, ``crop_area``,
            means and stds.
    """

    def __init__(self, config: OpenVLAConfig) -> None:
        self.size = config.image_size
        self.center_crop = config.center_crop
        self.crop_area = config.crop_area
        self.pipeline = config.image_pipeline
        self.means = [np.asarray(m, dtype=np.float32) for m in config.image_means]
        self.stds = [np.asarray(s, dtype=np.float32) for s in config.image_stds]

    def prepare(self, image: np.ndarray) -> np.ndarray:
        """uint8 (H, W, 3) -> uint8 (size, size, 3), per ``image_pipeline``.

        With ``libero_reference`` the input is LIBERO's raw frame (upside down, as LIBERO's
        env returns it); the 180-degree rotation is part of the pipeline.
        """
        img = _check_rgb_u8(image, "image")
        if self.pipeline == "libero_reference":
            return openvla_libero_image(
                img, center_crop=self.center_crop, crop_area=self.crop_area, size=self.size
            )
        pil = Image.fromarray(img)
        if self.center_crop:
            # Resize to size, crop sqrt(area) of each side, resize back: PIL's approximation of
            # OpenVLA's crop (the exact one is the libero_reference pipeline).
            pil = pil.resize((self.size, self.size), Image.Resampling.BICUBIC)
            scale = math.sqrt(self.crop_area)
            side = self.size * scale
            off = (self.size - side) / 2.0
            pil = pil.crop((off, off, off + side, off + side))
        if pil.size != (self.size, self.size):
            pil = pil.resize((self.size, self.size), Image.Resampling.BICUBIC)
        return np.asarray(pil, dtype=np.uint8)

    def __call__(self, images: Sequence[np.ndarray] | np.ndarray) -> torch.Tensor:
        """uint8 images (B, H, W, 3) or a list -> float32 pixel values (B, 6, size, size)."""
        if isinstance(images, np.ndarray) and images.ndim == 3:
            images = [images]
        arr = np.stack([self.prepare(im) for im in images]).astype(np.float32) / 255.0
        parts = [(arr - m) / s for m, s in zip(self.means, self.stds, strict=True)]
        stacked = np.concatenate(parts, axis=-1)  # (B, H, W, 6)
        return torch.from_numpy(np.ascontiguousarray(stacked.transpose(0, 3, 1, 2)))


class OpenVLAProcessor:
    """Every conversion between an env's native data and the model: prompt tokenisation,
    image preprocessing, action (de)tokenisation, un-normalisation and the action convention.

    Declared conventions (``check_compatible`` of the policy compares them with the env's):
    :attr:`image_orientation`, the frames :class:`ImageProcessor` takes, and
    :attr:`gripper_convention`, the gripper of :meth:`postprocess_actions`.

    Args:
        config: The model configuration (image pipeline, crop, statistics).
        tokenizer: A transformers tokenizer that adds BOS (Llama-2's, or :func:`build_tiny_tokenizer`).
        action_convention: What the decoded actions become (:data:`ACTION_CONVENTIONS`).
    """

    def __init__(
        self, config: OpenVLAConfig, tokenizer: Any, action_convention: str = "openvla"
    ) -> None:
        if action_convention not in ACTION_CONVENTIONS:
            raise ConfigError(
                f"unknown action_convention {action_convention!r}; options: "
                f"{list(ACTION_CONVENTIONS)}",
                fix="use 'libero' for LIBERO fine-tuned checkpoints on LIBERO, 'openvla' for "
                "released checkpoints elsewhere, 'as_trained' for models trained on the env",
            )
        self.config = config
        self.tokenizer = tokenizer
        self.action_convention = action_convention
        self.images = ImageProcessor(config)
        self.actions = ActionTokenizer(config.text_vocab_size, config.n_action_bins)
        bos = getattr(tokenizer, "bos_token_id", None)
        if bos is None:
            raise ConfigError("tokenizer has no BOS token; OpenVLA inputs start with [BOS]")
        self.bos_id = int(bos)
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_id = int(pad) if pad is not None else config.text_vocab_size

    @property
    def gripper_convention(self) -> str | None:
        """Gripper convention of :meth:`postprocess_actions` (None: not declared)."""
        return _GRIPPER_OF[self.action_convention]

    @property
    def image_orientation(self) -> str | None:
        """Orientation of the frames the image pipeline takes (None: not declared).

        ``libero_reference`` takes LIBERO's raw frames (``vertical_flip``) and rotates them
        itself. Otherwise frames are used as given: upright for released checkpoints; for a
        LIBERO fine-tuned model the upright scene mirrored (``horizontal_flip``), which is
        LIBERO's raw frame rotated by 180 degrees, what it was trained on.
        """
        if self.config.image_pipeline == "libero_reference":
            return "vertical_flip"
        if self.action_convention == "as_trained":
            return None
        return "horizontal_flip" if self.action_convention == "libero" else "upright"

    def postprocess_actions(
        self, normalized: np.ndarray, stats: dict[str, np.ndarray]
    ) -> np.ndarray:
        """Decoded [-1, 1] actions -> env actions: un-normalised with ``stats`` (masked
        q01/q99), then the action convention (LIBERO: gripper binarized and inverted)."""
        actions = unnormalize(normalized, stats)
        if self.action_convention == "libero":
            actions = libero_gripper_action(actions)
        return actions

    def prompt_ids(self, instruction: str) -> list[int]:
        """Token ids of the prompt, starting with BOS (+ the action prefix token if configured)."""
        ids = list(self.tokenizer(build_prompt(instruction))["input_ids"])
        if not ids or ids[0] != self.bos_id:
            ids = [self.bos_id, *ids]
        prefix = self.config.action_prefix_token_id
        if prefix is not None and ids[-1] != prefix:
            ids.append(int(prefix))
        return ids

    def encode_prompts(
        self, instructions: Sequence[str], suffixes: Sequence[Sequence[int]] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-padded ``input_ids`` and ``attention_mask`` (B, T); optional per-row suffix ids."""
        rows = [self.prompt_ids(s) for s in instructions]
        if suffixes is not None:
            rows = [r + [int(t) for t in suf] for r, suf in zip(rows, suffixes, strict=True)]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
            mask[i, width - len(r) :] = 1
        return ids, mask


TINY_WORDS = [
    "in",
    "out",
    "what",
    "action",
    "should",
    "the",
    "robot",
    "take",
    "to",
    "?",
    ":",
    ".",
    ",",
    "\n",
    "move",
    "reach",
    "go",
    "push",
    "pick",
    "place",
    "put",
    "lift",
    "touch",
    "point",
    "at",
    "on",
    "of",
    "a",
    "an",
    "and",
    "with",
    "toward",
    "towards",
    "slowly",
    "quickly",
    "fast",
    "slow",
    "carefully",
    "gently",
    "normally",
    "speed",
    "red",
    "green",
    "blue",
    "yellow",
    "orange",
    "purple",
    "white",
    "black",
    "cyan",
    "magenta",
    "pink",
    "gray",
    "grey",
    "target",
    "goal",
    "cube",
    "ball",
    "sphere",
    "block",
    "box",
    "marker",
    "object",
    "button",
    "left",
    "right",
    "front",
    "back",
    "up",
    "down",
    "top",
    "bottom",
    "center",
    "middle",
    "near",
    "far",
    "table",
    "arm",
    "gripper",
    "end",
    "effector",
    "hand",
]


def build_tiny_tokenizer(extra_words: Sequence[str] = (), vocab_size: int = 384) -> Any:
    """A word-level ``PreTrainedTokenizerFast`` built in code (no downloads).

    Ids: ``<unk>``=0, ``<s>``=1 (BOS, added to every encoding), ``</s>``=2, then the words,
    then ``<act_i>`` fillers so that the vocabulary has exactly ``vocab_size`` entries (the
    last 256 of which carry actions, as in OpenVLA), then ``<PAD>`` = ``vocab_size``.

    Args:
        extra_words: More words to give ids (e.g. from the training instructions).
        vocab_size: Text vocabulary size without the pad token.
    """
    return build_word_tokenizer(
        [*TINY_WORDS, *extra_words],
        specials=["<unk>", "<s>", "</s>"],
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<PAD>",
        split="whitespace",
        add_bos=True,
        vocab_size=vocab_size,
        filler="<act_{}>",
        reserve=256,
    )


def tokenizer_words(instructions: Sequence[str]) -> list[str]:
    """Words of ``instructions`` split like the tiny tokenizer splits them."""
    from tokenizers import pre_tokenizers

    pre = pre_tokenizers.Whitespace()
    out: list[str] = []
    for s in instructions:
        for w, _ in pre.pre_tokenize_str(s.lower()):
            if w not in out:
                out.append(w)
    return out
