"""Declared conventions: image orientation and gripper meaning, checked before the first step."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from embodied.contracts import Env, Policy
from embodied.errors import CompatibilityError, ConfigError
from embodied.loop import rollout
from embodied.specs import (
    GRIPPER_CONVENTIONS,
    IMAGE_ORIENTATIONS,
    ImageSpec,
    ObservationSpec,
    VectorSpec,
    upright,
)


class CameraGripperEnv(Env):
    """A 2-dim env (dx, gripper) with one 4x4 camera; counts its steps."""

    env_id = "test:camera_gripper"
    instruction = "grip"
    control_rate_hz = 10.0
    max_episode_steps = 5

    def __init__(self, orientation: str = "upright", gripper: str | None = "close_positive"):
        self.observation_spec = ObservationSpec(
            VectorSpec.uniform(["x"], -1.0, 1.0, "m"), {"front": ImageSpec(4, 4, orientation)}
        )
        self.action_spec = VectorSpec(("dx", "gripper"), (-1.0, -1.0), (1.0, 1.0), ("1", "1"))
        self.gripper_convention = gripper
        self.steps = 0

    def _obs(self) -> dict[str, Any]:
        return {
            "state": np.zeros(1, np.float32),
            "image.front": np.zeros((4, 4, 3), np.uint8),
            "instruction": self.instruction,
        }

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        return self._obs(), {"success": False}

    def step(self, action: np.ndarray):
        self.steps += 1
        return self._obs(), 0.0, False, False, {"success": False}


class DeclaringPolicy(Policy):
    """Zero actions; declares the conventions it is given."""

    action_dim = 2
    image_keys = ("image.front",)

    def __init__(self, orientation: str | None, gripper: str | None) -> None:
        super().__init__()
        self.image_orientation = orientation
        self.gripper_convention = gripper

    def predict_action_chunk(self, obs: dict[str, Any]) -> np.ndarray:
        return np.zeros((1, 2))


def test_upright_undoes_each_orientation() -> None:
    frame = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)  # upright
    made = {
        "upright": frame,
        "vertical_flip": frame[::-1],
        "horizontal_flip": frame[:, ::-1],
        "rotate_180": frame[::-1, ::-1],
    }
    assert set(made) == set(IMAGE_ORIENTATIONS)
    for orientation, img in made.items():
        out = upright(img, orientation)
        np.testing.assert_array_equal(out, frame)
        assert out.flags.c_contiguous
        np.testing.assert_array_equal(upright(frame, orientation), img)  # its own inverse
    clip = np.stack([made["vertical_flip"]] * 4)  # (T, H, W, 3), e.g. a video
    np.testing.assert_array_equal(upright(clip, "vertical_flip"), np.stack([frame] * 4))
    with pytest.raises(ConfigError, match="'sideways'") as info:
        upright(frame, "sideways")
    assert "vertical_flip" in str(info.value)


def test_unknown_orientation_is_refused_by_the_spec() -> None:
    assert ImageSpec(8, 8).orientation == "upright"
    with pytest.raises(ConfigError, match="'upside_down'") as info:
        ImageSpec(8, 8, "upside_down")
    assert all(o in str(info.value) for o in IMAGE_ORIENTATIONS)
    spec = ObservationSpec(
        VectorSpec.uniform(["x"], -1, 1, "m"), {"f": ImageSpec(4, 4, "rotate_180")}
    )
    assert spec.to_dict()["orientation"] == {"f": "rotate_180"}


@pytest.mark.parametrize(
    ("env_kw", "policy_kw", "needle"),
    [
        (
            {"orientation": "upright"},
            {"orientation": "vertical_flip", "gripper": None},
            "expects image.front frames 'vertical_flip'",
        ),
        (
            {"orientation": "vertical_flip"},
            {"orientation": "upright", "gripper": None},
            "delivers them 'vertical_flip'",
        ),
        (
            {"gripper": "close_positive"},
            {"orientation": None, "gripper": "open_positive"},
            "outputs gripper commands as 'open_positive'",
        ),
        (
            {"gripper": "open_positive"},
            {"orientation": None, "gripper": "close_positive"},
            "takes 'open_positive'",
        ),
    ],
)
def test_each_convention_mismatch_is_refused_before_the_first_step(
    env_kw: dict[str, Any], policy_kw: dict[str, Any], needle: str
) -> None:
    env = CameraGripperEnv(**env_kw)
    policy = DeclaringPolicy(**policy_kw)
    with pytest.raises(CompatibilityError, match=needle) as info:
        rollout(env, policy)
    msg = str(info.value)
    assert "DeclaringPolicy" in msg and "test:camera_gripper" in msg and "fix:" in msg
    assert env.steps == 0


def test_matching_or_undeclared_conventions_pass() -> None:
    for orientation in IMAGE_ORIENTATIONS:
        for gripper in GRIPPER_CONVENTIONS:
            env = CameraGripperEnv(orientation, gripper)
            DeclaringPolicy(orientation, gripper).check_compatible(env)
            DeclaringPolicy(None, None).check_compatible(env)  # undeclared: not checked
    # an env without a gripper (None) accepts any declared gripper convention
    DeclaringPolicy(None, "open_positive").check_compatible(CameraGripperEnv(gripper=None))
    ep = rollout(CameraGripperEnv("vertical_flip"), DeclaringPolicy("vertical_flip", None))
    assert len(ep) == 5
    assert CameraGripperEnv().describe()["gripper_convention"] == "close_positive"


def test_unknown_declared_convention_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="'pinch'"):
        DeclaringPolicy(None, "pinch").check_compatible(CameraGripperEnv())
