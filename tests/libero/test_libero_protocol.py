"""The LIBERO protocol object, image preprocessing and gripper conventions (no simulator)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from embodied.errors import ConfigError, UnknownNameError
from sim.libero.configuration_libero import SUITES, LiberoProtocol, check_suite
from sim.libero.processing_libero import (
    center_crop,
    gripper_from_libero,
    gripper_to_libero,
    openvla_image,
    rotate_180,
)


def test_defaults_are_the_openvla_libero_protocol() -> None:
    p = LiberoProtocol()
    assert {s: p.max_steps(s) for s in SUITES} == {
        "libero_spatial": 220,
        "libero_object": 280,
        "libero_goal": 300,
        "libero_10": 520,
        "libero_90": 400,
    }
    assert (p.num_wait_steps, p.trials_per_task, p.control_rate_hz, p.render_size) == (
        10,
        50,
        20.0,
        256,
    )
    assert p.image_size == 256 and p.gripper_convention == "libero"
    vla = LiberoProtocol.openvla()
    assert vla.image_size == 224 and vla.center_crop_scale == 0.9
    assert vla.gripper_convention == "openvla" and vla.image_preprocess == "openvla"


def test_protocol_is_frozen_and_roundtrips_through_json() -> None:
    p = LiberoProtocol.openvla(max_steps_by_suite={"libero_10": 600}, num_wait_steps=5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.num_wait_steps = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        p.max_steps_by_suite["libero_10"] = 1  # type: ignore[index]
    d = json.loads(json.dumps(p.to_dict()))
    assert d["max_steps_by_suite"]["libero_10"] == 600
    assert d["max_steps_by_suite"]["libero_spatial"] == 220  # defaults merged in
    assert "-sign(2 * g - 1)" in d["gripper_convention_doc"]
    assert LiberoProtocol.from_dict(d) == p


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"max_steps_by_suite": {"libero_11": 10}}, "libero_11"),
        ({"max_steps_by_suite": {"libero_10": 0}}, "positive"),
        ({"num_wait_steps": -1}, "num_wait_steps"),
        ({"trials_per_task": 0}, "trials_per_task"),
        ({"control_rate_hz": 0.0}, "control_rate_hz"),
        ({"render_size": 8}, "render_size"),
        ({"image_preprocess": "clip"}, "'clip'"),
        ({"gripper_convention": "robotiq"}, "'robotiq'"),
        ({"image_preprocess": "openvla", "center_crop_scale": 1.5}, "center_crop_scale"),
        ({"center_crop_scale": 0.9}, "needs image_preprocess='openvla'"),
    ],
)
def test_bad_protocol_values_are_named(kwargs: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=None) as info:
        LiberoProtocol(**kwargs)
    assert needle in str(info.value)


def test_unknown_suite_lists_suites() -> None:
    with pytest.raises(UnknownNameError) as info:
        check_suite("libero_100")
    assert all(s in str(info.value) for s in SUITES)
    with pytest.raises(UnknownNameError):
        LiberoProtocol().max_steps("spatial")


def test_gripper_conventions_map_open_and_close() -> None:
    # LIBERO native: -1 opens, +1 closes; OpenVLA: 1 open, 0 closed.
    assert gripper_to_libero(1.0, "openvla") == -1.0  # open
    assert gripper_to_libero(0.0, "openvla") == 1.0  # close
    assert gripper_to_libero(0.8, "openvla") == -1.0  # binarized like OpenVLA
    assert gripper_to_libero(0.2, "openvla") == 1.0
    assert gripper_to_libero(-0.3, "libero") == -0.3
    for native in (-1.0, 1.0):
        assert gripper_to_libero(gripper_from_libero(native, "openvla"), "openvla") == native
    assert gripper_from_libero(-1.0, "openvla") == 1.0
    with pytest.raises(ConfigError, match="'robotiq'"):
        gripper_to_libero(0.0, "robotiq")


def test_openvla_image_rotates_resizes_and_crops() -> None:
    img = np.zeros((256, 256, 3), dtype=np.uint8)
    img[:16, :16] = 255  # bright top-left corner
    rot = rotate_180(img)
    assert rot[-1, -1].tolist() == [255, 255, 255] and rot[0, 0].tolist() == [0, 0, 0]
    out = openvla_image(img, 224, 1.0)
    assert out.shape == (224, 224, 3) and out.dtype == np.uint8
    assert out[-5:, -5:].mean() > 200 and out[:50, :50].max() == 0
    crop = center_crop(np.arange(100 * 100 * 3, dtype=np.uint8).reshape(100, 100, 3), 0.81)
    assert crop.shape == (90, 90, 3)
    cropped = openvla_image(img, 224, 0.9)
    assert cropped.shape == (224, 224, 3)
    # the crop cuts away most of the 16 px corner: fewer bright pixels than uncropped
    assert (cropped > 128).sum() < (out > 128).sum()


def test_protocol_pickles_for_worker_processes() -> None:
    import pickle

    p = LiberoProtocol.openvla(max_steps_by_suite={"libero_goal": 350})
    q = pickle.loads(pickle.dumps(p))
    assert q == p and q.max_steps("libero_goal") == 350 and q.image_size == 224
