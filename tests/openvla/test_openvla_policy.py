"""OpenVLA policy conventions: the reference's gripper post-processing and what is declared."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from embodied.contracts import Env
from embodied.errors import CompatibilityError, ConfigError
from embodied.specs import ImageSpec, ObservationSpec, VectorSpec
from policies.openvla.policy_openvla import OpenVLAPolicy, env_preset, libero_unnorm_key
from policies.openvla.processor_openvla import (
    ACTION_CONVENTIONS,
    OpenVLAProcessor,
    invert_gripper_action,
    libero_gripper_action,
    normalize_gripper_action,
)


class SevenDofEnv(Env):
    """No simulator: a 7-dim arm+gripper env with one camera, conventions as given."""

    instruction = "put the bowl on the plate"
    control_rate_hz = 20.0
    max_episode_steps = 3

    def __init__(self, env_id: str, orientation: str, gripper: str | None) -> None:
        self.env_id = env_id
        self.observation_spec = ObservationSpec(
            VectorSpec.uniform([f"s{i}" for i in range(8)], -9.0, 9.0, "1"),
            {"agentview": ImageSpec(32, 32, orientation)},
        )
        self.action_spec = VectorSpec.uniform([f"a{i}" for i in range(7)], -1.0, 1.0, "1")
        self.gripper_convention = gripper

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        raise AssertionError("check_compatible must not reset")

    def step(self, action: np.ndarray):
        raise AssertionError("check_compatible must not step")


LIBERO_LIKE = ("test:libero_like", "vertical_flip", "close_positive")
ROBOSUITE_LIKE = ("test:robosuite_like", "upright", "close_positive")


def test_gripper_post_processing_is_the_references() -> None:
    # robot_utils.normalize_gripper_action(binarize=True) then invert_gripper_action:
    # the model's 1 (open) becomes LIBERO's -1 (open), 0 (closed) becomes +1 (close).
    a = np.array([[0.1, -0.2, 0.3, 0.0, 0.0, 0.5, g] for g in (1.0, 0.0, 0.8, 0.2, 0.5)])
    out = libero_gripper_action(a)
    assert out[:, -1].tolist() == [-1.0, 1.0, -1.0, 1.0, 0.0]  # sign(0) stays 0, as there
    np.testing.assert_array_equal(out[:, :6], a[:, :6])
    assert a[0, -1] == 1.0  # input untouched
    np.testing.assert_allclose(
        normalize_gripper_action(a, binarize=False)[:, -1], [1.0, -1.0, 0.6, -0.6, 0.0]
    )
    assert invert_gripper_action(np.array([0.0, 1.0]))[-1] == -1.0
    np.testing.assert_array_equal(libero_gripper_action(a[0]), out[0])  # one action too


def _policy(tiny: tuple, convention: str = "openvla", pipeline: str = "resize") -> OpenVLAPolicy:
    model, proc = tiny
    config = dataclasses.replace(proc.config, image_pipeline=pipeline)
    return OpenVLAPolicy(model, OpenVLAProcessor(config, proc.tokenizer, convention))


def test_libero_convention_post_processes_the_decoded_actions(tiny: tuple) -> None:
    _model, proc = tiny
    frame = np.random.default_rng(0).integers(0, 255, (32, 32, 3), dtype=np.uint8)
    plain = _policy(tiny).predict_batch([frame], ["reach the red cube"])
    libero = _policy(tiny, "libero")
    np.testing.assert_array_equal(
        libero.predict_batch([frame], ["reach the red cube"]), libero_gripper_action(plain)
    )
    with pytest.raises(ConfigError, match="'robosuite'") as info:
        OpenVLAProcessor(proc.config, proc.tokenizer, "robosuite")
    assert all(c in str(info.value) for c in ACTION_CONVENTIONS)


def test_declared_conventions_are_the_processors(tiny: tuple) -> None:
    def declared(p: OpenVLAPolicy) -> tuple[str | None, str | None]:
        assert (p.image_orientation, p.gripper_convention) == (
            p.processor.image_orientation,
            p.processor.gripper_convention,
        )
        return p.image_orientation, p.gripper_convention

    assert declared(_policy(tiny)) == ("upright", "open_positive")
    assert declared(_policy(tiny, "libero")) == (
        "horizontal_flip",  # trained on LIBERO frames rotated 180 degrees
        "close_positive",
    )
    assert declared(_policy(tiny, "as_trained")) == (None, None)
    assert declared(_policy(tiny, "libero", "libero_reference")) == (
        "vertical_flip",
        "close_positive",
    )


def test_openvla_for_libero_is_refused_off_libero_and_plain_openvla_on_it(tiny: tuple) -> None:
    _policy(tiny, "libero", "libero_reference").check_compatible(SevenDofEnv(*LIBERO_LIKE))
    with pytest.raises(CompatibilityError, match="delivers them 'upright'") as info:
        _policy(tiny, "libero", "libero_reference").check_compatible(SevenDofEnv(*ROBOSUITE_LIKE))
    assert "test:robosuite_like" in str(info.value)
    with pytest.raises(
        CompatibilityError, match="outputs gripper commands as 'open_positive'"
    ) as info:
        _policy(tiny).check_compatible(SevenDofEnv(*LIBERO_LIKE))
    assert "preset=libero" in str(info.value)
    # LIBERO's gripper but the plain resize pipeline: frames would reach the model unrotated
    with pytest.raises(CompatibilityError, match="'horizontal_flip'"):
        _policy(tiny, "libero").check_compatible(SevenDofEnv(*LIBERO_LIKE))
    _policy(tiny).check_compatible(SevenDofEnv("test:upright", "upright", None))
    _policy(tiny, "as_trained").check_compatible(SevenDofEnv(*LIBERO_LIKE))


def test_the_preset_follows_the_envs_declared_conventions() -> None:
    assert env_preset(SevenDofEnv(*LIBERO_LIKE)) == "libero"
    assert env_preset(SevenDofEnv(*ROBOSUITE_LIKE)) == "openvla"
    assert env_preset(SevenDofEnv("test:flipped_no_gripper", "vertical_flip", None)) == "openvla"
    assert env_preset(None) == "openvla"


def test_libero_statistics_key_is_the_suite_as_in_the_reference() -> None:
    assert libero_unnorm_key(["bridge_orig", "libero_goal"], "libero_goal") == "libero_goal"
    assert libero_unnorm_key(["libero_10_no_noops"], "libero_10") == "libero_10_no_noops"
    with pytest.raises(CompatibilityError, match="not fine-tuned") as info:
        libero_unnorm_key(["bridge_orig"], "libero_spatial")
    assert "openvla/openvla-7b-finetuned-libero-spatial" in str(info.value)
