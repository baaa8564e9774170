"""`embodied eval --judge`: each episode is judged and agreement with the env's success reported."""

from __future__ import annotations

import numpy as np

from embodied.apps.training.data_minijudge import arrival_steps, record_episodes


def test_eval_reports_judge_agreement() -> None:
    from embodied.apps.evaluation import EvalConfig, evaluate

    cfg = EvalConfig("mujoco:arm_reach", episodes=2, workers=0, seed=7000, judge="minijudge")
    result = evaluate(cfg, "expert")
    probs = [e.judge_prob for e in result.episodes]
    assert all(p is not None and 0.0 <= p <= 1.0 for p in probs)
    agr = result.to_dict()["judge_agreement"]
    assert agr["judge"] == "minijudge" and agr["episodes"] == 2
    assert agr["n_pos"] == sum(e.success for e in result.episodes)
    assert "Judge vs oracle" in result.markdown()
    plain = evaluate(EvalConfig("mujoco:arm_reach", episodes=1, workers=0, max_steps=3), "expert")
    assert plain.episodes[0].judge_prob is None and "judge_agreement" not in plain.to_dict()


def test_wrong_cube_episodes_are_failures_of_the_named_task() -> None:
    (episode,) = record_episodes("mujoco:arm_reach", 1, 11000, kinds=("wrong",))
    reached = episode.infos[-1]["target"]
    assert reached not in episode.task  # the instruction names another cube
    assert not episode.labels.any()  # ... so no frame is a success of it
    assert episode.infos[arrival_steps(episode)[0]]["success"]  # though the arm reached a cube
    assert np.ndim(episode.frames) == 4


def test_swap_episodes_rotate_the_colours_over_one_layout() -> None:
    """Colour-swap groups: same cube positions and target position, the colours rotated, so
    only the colour under the gripper tells the four episodes apart."""
    episodes = record_episodes("mujoco:arm_reach", 2, 12000, kinds=("swap",))
    a, b = (d.meta["cubes"] for d in episodes)
    assert [d.task for d in episodes] == ["reach the red cube", "reach the green cube"]
    assert all(d.success for d in episodes)
    np.testing.assert_allclose(a["red"], b["green"])  # the target position keeps its place
    np.testing.assert_allclose(a["green"], b["blue"])
    np.testing.assert_allclose(a["yellow"], b["red"])
    ends = [d.infos[-1]["ee_pos"] for d in episodes]
    np.testing.assert_allclose(ends[0], ends[1], atol=0.01)  # the same reach both times
