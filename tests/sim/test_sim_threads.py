"""Rendering from a worker thread (tuning server, RL training) gives the same frames."""

from __future__ import annotations

import threading

import numpy as np

import sim


def test_camera_env_renders_identically_from_another_thread() -> None:
    env = sim.make("mujoco:arm_reach", camera=True)
    obs, _ = env.reset(seed=3)
    out: dict[str, np.ndarray] = {}
    errors: list[BaseException] = []

    def work() -> None:
        try:
            o, _ = env.reset(seed=3)
            out["img"] = o["image.front"]
        except BaseException as exc:  # surfaced in the main thread below
            errors.append(exc)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert not errors, errors
    np.testing.assert_array_equal(out["img"], obs["image.front"])
    assert obs["image.front"].std() > 1.0  # a real picture, not a blank buffer
    env.close()
