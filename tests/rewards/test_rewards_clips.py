"""Clip validation, instruction templates, rates and calibration."""

from __future__ import annotations

import numpy as np
import pytest

from embodied.errors import ConfigError
from embodied.rewards.calibration import (
    best_threshold,
    calibration_table,
    fit_platt,
    rates,
    tnr_threshold,
)
from embodied.rewards.clips import (
    context_indices,
    episode_clips,
    format_instruction,
    resample_clip,
    success_labels,
    validate_frames,
)


def test_validate_frames_accepts_clips_and_single_frames() -> None:
    clip = np.zeros((5, 16, 24, 3), np.uint8)
    assert validate_frames(clip).shape == (5, 16, 24, 3)
    assert validate_frames(clip[0]).shape == (1, 16, 24, 3)
    assert validate_frames(list(clip)).shape == (5, 16, 24, 3)


@pytest.mark.parametrize(
    ("frames", "needle"),
    [
        ([], "empty"),
        (np.zeros((0, 16, 16, 3), np.uint8), "empty"),
        (np.zeros((5, 16, 16, 3), np.float32), "dtype float32"),
        (np.zeros((5, 16, 16), np.uint8), "shape (5, 16, 16)"),
        (np.zeros((5, 3, 16, 16), np.uint8), "shape (5, 3, 16, 16)"),
        (np.zeros((2, 4, 4, 3), np.uint8), "at least 8x8"),
        ([np.zeros((16, 16, 3), np.uint8), np.zeros((8, 8, 3), np.uint8)], "mixes frame shapes"),
    ],
)
def test_validate_frames_errors_name_value_and_fix(frames: object, needle: str) -> None:
    with pytest.raises(ConfigError) as exc:
        validate_frames(frames)  # type: ignore[arg-type]
    assert needle in str(exc.value)
    assert "fix:" in str(exc.value) or needle.startswith(("shape", "at least"))


def test_format_instruction_needs_task_field() -> None:
    assert format_instruction("Task: {task}.", "reach the red cube.") == "Task: reach the red cube."
    with pytest.raises(ConfigError, match=r"has no \{task\} field"):
        format_instruction("Evaluate the robot.", "reach the red cube")
    with pytest.raises(ConfigError, match="empty"):
        format_instruction("Task: {task}", "  ")


def test_context_indices_four_earlier_evenly_spaced_plus_current() -> None:
    assert context_indices(40).tolist() == [0, 10, 20, 30, 40]
    assert context_indices(7).tolist() == [0, 1, 3, 5, 7]
    assert context_indices(0).tolist() == [0, 0, 0, 0, 0]
    assert context_indices(3).tolist()[-1] == 3
    frames = np.arange(10)[:, None, None, None].repeat(8, 1).repeat(8, 2).repeat(3, 3)
    clips = episode_clips(frames.astype(np.uint8))
    assert clips.shape == (10, 5, 8, 8, 3)
    assert clips[9, :, 0, 0, 0].tolist() == context_indices(9).tolist()
    assert resample_clip(frames.astype(np.uint8), 5)[-1, 0, 0, 0] == 9


def test_success_labels_are_monotone() -> None:
    assert success_labels(5, 2).tolist() == [False, False, True, True, True]
    assert not success_labels(5, -1).any()


def test_rates_and_threshold() -> None:
    y = np.array([1, 1, 0, 0, 0], bool)
    r = rates(np.array([1, 0, 1, 0, 0], bool), y)
    assert (r.tpr, r.tnr, r.fpr, r.fnr) == (
        50.0,
        pytest.approx(200 / 3),
        pytest.approx(100 / 3),
        50.0,
    )
    assert r.accuracy == pytest.approx(60.0)
    p = np.array([0.9, 0.8, 0.3, 0.2, 0.1])
    t = best_threshold(p, y)
    assert 0.3 < t <= 0.8
    table = calibration_table(p, y)
    assert table[0]["threshold"] == 0.05 and table[0]["tpr"] == 100.0
    with pytest.raises(ConfigError, match="decisions for"):
        rates([True], [True, False])


def test_tnr_threshold_is_the_lowest_keeping_every_group_at_the_target(
    rng: np.random.Generator,
) -> None:
    """The Neyman-Pearson rule: each group keeps TNR >= target, and the threshold cannot go
    lower (the next lower negative score would pass in the binding group)."""
    p, y = rng.random(600), rng.random(600) < 0.3
    g = np.where(rng.random(600) < 0.5, "arm", "ball")
    p[(g == "ball") & ~y] *= 0.5  # one group's negatives score lower: the other one binds
    for target in (0.5, 0.9, 0.97, 0.99):
        t = tnr_threshold(p, y, g, target)
        tnrs = {k: rates(p[g == k] >= t, y[g == k]).tnr for k in ("arm", "ball")}
        assert min(tnrs.values()) >= 100 * target, (target, tnrs)
        below = p[(g == "arm") & ~y & (p < t)].max()  # the binding group's highest rejected
        assert rates(p[g == "arm"] >= below, y[g == "arm"]).tnr < 100 * target
        assert tnrs["ball"] > tnrs["arm"]
    # ties: the threshold sits above the tied scores, never between equal ones
    assert tnr_threshold([0.2, 0.2, 0.2, 0.9], [0, 0, 0, 1], ["a"] * 4, 0.5) > 0.2
    assert tnr_threshold([0.1, 0.4], [0, 0], ["a", "a"], 0.99) > 0.4  # all must be rejected
    with pytest.raises(ConfigError, match="target TNR 95"):
        tnr_threshold(p, y, g, 95)
    with pytest.raises(ConfigError, match="group 'b' has no negative"):
        tnr_threshold([0.1, 0.9], [0, 1], ["a", "b"], 0.9)


def test_fit_platt_recovers_slope_sign_and_refuses_one_class(rng: np.random.Generator) -> None:
    s = rng.normal(size=400)
    y = rng.random(400) < 1 / (1 + np.exp(-(4 * s - 1)))
    a, b = fit_platt(s, y)
    assert 2.5 < a < 6 and -2 < b < 0
    with pytest.raises(ConfigError, match="one class"):
        fit_platt(s, np.ones_like(y))
