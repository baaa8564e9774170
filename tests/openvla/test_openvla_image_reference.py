"""OpenVLA's LIBERO image pipeline against the reference TensorFlow outputs.

The fixture ``fixtures/libero_image_reference.npz`` holds raw LIBERO frames and what
openvla/openvla's own TensorFlow code makes of them (``get_libero_image`` and
``get_vla_action(center_crop=True)``); ``fixtures/make_image_reference.py`` made it, see
``fixtures/README.md``. Our pipeline runs without TensorFlow.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from policies.openvla.configuration_openvla import OpenVLAConfig
from policies.openvla.processor_openvla import (
    ImageProcessor,
    jpeg_round_trip,
    libero_reference_crop,
    libero_reference_resize,
    openvla_libero_image,
)

FIXTURE = Path(__file__).parent / "fixtures" / "libero_image_reference.npz"

MEAN_TOL = 1.0
"""Required: mean absolute difference per image, in intensity levels."""

MAX_TOL = 1
"""Largest per-pixel difference allowed. Measured: 0 on every fixture frame (bit-exact). The
one known departure is float32 rounding inside the lanczos3 weights (TensorFlow's ``sinf``
differs from ours by a few ulp; resized values differ by <= 6.1e-5 before rounding), which
can move a value across a rounding boundary by one level at most."""


def _decode(blob: np.ndarray) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(blob.tobytes())).convert("RGB"), dtype=np.uint8)


@pytest.fixture(scope="module")
def ref() -> dict[str, Any]:
    with np.load(FIXTURE) as data:
        meta = json.loads(str(data["meta"]))
        n = int(meta["n_frames"])
        out: dict[str, Any] = {"meta": meta}
        for key in ("raw", "resized", "cropped"):
            out[key] = [_decode(data[f"{key}_{i}"]) for i in range(n)]
    return out


def _diff(ours: np.ndarray, theirs: np.ndarray) -> tuple[float, int, int]:
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype == np.uint8
    d = np.abs(ours.astype(np.int16) - theirs.astype(np.int16))
    return float(d.mean()), int(d.max()), int((d > 0).sum())


def test_fixture_is_what_the_readme_says(ref: dict[str, Any]) -> None:
    meta = ref["meta"]
    assert meta["reference_repo"] == "openvla/openvla"
    assert len(ref["raw"]) == len(meta["tf_jpeg_sha256"]) >= 4
    assert len({label.split()[0].split(":")[0] for label in meta["frames"]}) >= 2  # suites
    for raw, resized, cropped in zip(ref["raw"], ref["resized"], ref["cropped"], strict=True):
        assert raw.shape == (256, 256, 3)
        assert resized.shape == cropped.shape == (224, 224, 3)


def test_jpeg_encoding_is_byte_identical_to_tensorflow(ref: dict[str, Any]) -> None:
    """Pillow at quality 95, 4:2:0, 300 dpi writes the very bytes of ``tf.image.encode_jpeg``."""
    from PIL import Image as PILImage

    for raw, want in zip(ref["raw"], ref["meta"]["tf_jpeg_sha256"], strict=True):
        buf = io.BytesIO()
        rotated = np.ascontiguousarray(raw[::-1, ::-1])
        PILImage.fromarray(rotated).save(
            buf, "JPEG", quality=95, subsampling="4:2:0", dpi=(300, 300)
        )
        assert hashlib.sha256(buf.getvalue()).hexdigest() == want


def test_resize_step_matches_tensorflow(ref: dict[str, Any]) -> None:
    """Step 2, ``get_libero_image``: rotate 180, JPEG round trip, lanczos3 antialiased resize."""
    for i, (raw, want) in enumerate(zip(ref["raw"], ref["resized"], strict=True)):
        ours = libero_reference_resize(raw[::-1, ::-1], 224)
        mean, worst, count = _diff(ours, want)
        print(f"frame {i} resize: mean {mean:.4f} max {worst} differing values {count}")
        assert mean <= MEAN_TOL
        assert worst <= MAX_TOL
        assert np.array_equal(openvla_libero_image(raw, center_crop=False), ours)


def test_crop_step_matches_tensorflow(ref: dict[str, Any]) -> None:
    """Step 3, ``get_vla_action(center_crop=True)``, from TF's step-2 image and end to end."""
    for i, (raw, resized, want) in enumerate(
        zip(ref["raw"], ref["resized"], ref["cropped"], strict=True)
    ):
        alone = _diff(libero_reference_crop(resized, 0.9, 224), want)
        full = _diff(openvla_libero_image(raw, center_crop=True), want)
        print(
            f"frame {i} crop: from TF step 2 mean {alone[0]:.4f} max {alone[1]}; "
            f"end to end mean {full[0]:.4f} max {full[1]} differing values {full[2]}"
        )
        for mean, worst, _ in (alone, full):
            assert mean <= MEAN_TOL
            assert worst <= MAX_TOL


def test_rotation_and_crop_are_applied(ref: dict[str, Any]) -> None:
    """The checks can fail: an unrotated frame or a skipped crop is far from the reference."""
    raw, resized, cropped = ref["raw"][0], ref["resized"][0], ref["cropped"][0]
    unrotated = openvla_libero_image(np.ascontiguousarray(raw[::-1, ::-1]), center_crop=False)
    assert _diff(unrotated, resized)[0] > 10 * MEAN_TOL
    no_crop = openvla_libero_image(raw, center_crop=False)
    assert _diff(no_crop, cropped)[0] > 5 * MEAN_TOL
    assert not np.array_equal(no_crop, openvla_libero_image(raw, center_crop=True))


def test_jpeg_round_trip_matters(ref: dict[str, Any]) -> None:
    """The JPEG round trip changes pixels (so skipping it would be caught)."""
    raw = np.ascontiguousarray(ref["raw"][0][::-1, ::-1])
    assert _diff(jpeg_round_trip(raw), raw)[0] > 0.5


def test_image_processor_uses_the_reference_pipeline(ref: dict[str, Any]) -> None:
    cfg = OpenVLAConfig(image_pipeline="libero_reference", center_crop=True)
    proc = ImageProcessor(cfg)
    raw = ref["raw"][:2]
    for frame, want in zip(raw, ref["cropped"][:2], strict=True):
        assert np.array_equal(proc.prepare(frame), want)
    pixels = proc(np.stack(raw))
    assert pixels.shape == (2, 6, 224, 224)
    x = torch.from_numpy(np.stack(ref["cropped"][:2]).astype(np.float32) / 255.0)
    dino = (x - torch.tensor(cfg.image_means[0])) / torch.tensor(cfg.image_stds[0])
    torch.testing.assert_close(pixels[:, :3], dino.permute(0, 3, 1, 2))
    cfg.center_crop = False
    assert np.array_equal(ImageProcessor(cfg).prepare(raw[0]), ref["resized"][0])


def test_image_pipeline_option() -> None:
    assert OpenVLAConfig().image_pipeline == "resize"  # the default for non-LIBERO envs
    with pytest.raises(Exception, match="image_pipeline"):
        OpenVLAConfig(image_pipeline="tensorflow")
    cfg = OpenVLAConfig(image_pipeline="libero_reference")
    assert OpenVLAConfig.from_dict(cfg.to_dict()).image_pipeline == "libero_reference"
