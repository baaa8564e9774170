"""The LIBERO protocol object (no simulator)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from embodied.errors import ConfigError, UnknownNameError
from sim.libero.configuration_libero import LEGACY_KEYS, SUITES, LiberoProtocol, check_suite


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
    assert (p.seed, p.env_seed, p.reseed_on_reset) == (7, 0, False)


def test_protocol_is_frozen_and_roundtrips_through_json() -> None:
    p = LiberoProtocol(max_steps_by_suite={"libero_10": 600}, num_wait_steps=5, env_seed=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.num_wait_steps = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        p.max_steps_by_suite["libero_10"] = 1  # type: ignore[index]
    d = json.loads(json.dumps(p.to_dict()))
    assert d["max_steps_by_suite"]["libero_10"] == 600
    assert d["max_steps_by_suite"]["libero_spatial"] == 220  # defaults merged in
    assert LiberoProtocol.from_dict(d) == p


def test_result_files_written_with_the_old_conversion_keys_still_load() -> None:
    # The protocol of an old `--protocol openvla` result file: the env converted images
    # and the gripper then; the keys are dropped (the policy's processor owns that now).
    old = {
        "max_steps_by_suite": {"libero_spatial": 220},
        "num_wait_steps": 10,
        "trials_per_task": 50,
        "control_rate_hz": 20.0,
        "render_size": 256,
        "image_preprocess": "openvla",
        "policy_image_size": 224,
        "center_crop_scale": 0.9,
        "gripper_convention": "openvla",
        "seed": 7,
        "image_size": 224,
        "gripper_convention_doc": "action[6] in [0, 1]: 1 open, 0 closed",
        "image_preprocess_doc": "rotate 180 degrees, resize to policy_image_size",
    }
    assert set(old) - set(LiberoProtocol().to_dict()) == set(LEGACY_KEYS)
    assert LiberoProtocol.from_dict(old) == LiberoProtocol()
    with pytest.raises(ConfigError, match="'flip'"):
        LiberoProtocol.from_dict({**old, "flip": True})


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"max_steps_by_suite": {"libero_11": 10}}, "libero_11"),
        ({"max_steps_by_suite": {"libero_10": 0}}, "positive"),
        ({"num_wait_steps": -1}, "num_wait_steps"),
        ({"trials_per_task": 0}, "trials_per_task"),
        ({"control_rate_hz": 0.0}, "control_rate_hz"),
        ({"render_size": 8}, "render_size"),
        ({"env_seed": -1}, "env_seed"),
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


def test_protocol_pickles_for_worker_processes() -> None:
    import pickle

    p = LiberoProtocol(max_steps_by_suite={"libero_goal": 350}, reseed_on_reset=True)
    q = pickle.loads(pickle.dumps(p))
    assert q == p and q.max_steps("libero_goal") == 350 and q.reseed_on_reset
