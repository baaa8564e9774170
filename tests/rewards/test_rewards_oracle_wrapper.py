"""Simulator oracle, frame labels, episode judging and the gymnasium reward wrapper."""

from __future__ import annotations

import numpy as np
import pytest

import policies
import sim
from embodied.errors import ConfigError
from embodied.loop import rollout
from embodied.rewards.judging import episode_frames, judge_episodes
from embodied.rewards.oracle import SimOracle, frame_labels
from embodied.rewards.wrappers import JudgeReward


@pytest.fixture(scope="module")
def arm_env():
    env = sim.make("mujoco:arm_reach")
    yield env
    env.close()


def test_oracle_follows_the_loop_and_labels_frames(arm_env) -> None:
    oracle = SimOracle()
    with pytest.raises(ConfigError, match="has not seen any step"):
        oracle.score(np.zeros((5, 16, 16, 3), np.uint8), "reach the red cube")
    ep = rollout(
        arm_env,
        policies.load("expert", env=arm_env, speed=0.25),
        seed=3,
        callbacks=[oracle.observe],
    )
    assert ep.success and ep.success_step == len(ep) - 1
    assert oracle.score(ep.frames()[-5:], ep.instruction) == 1.0
    frames = episode_frames(ep)  # recorded frames + the frame after the last step
    assert len(frames) == len(ep) + 1
    np.testing.assert_array_equal(frames[-1], ep.final_observation["image.front"])
    labels = frame_labels(ep, len(frames))
    assert labels[-1] and not labels[:-1].any()


def test_judge_episodes_reports_agreement(arm_env, minijudge) -> None:
    eps = [
        rollout(arm_env, policies.load("expert", env=arm_env, speed=0.25), seed=7),
        rollout(arm_env, policies.load("random", env=arm_env, seed=1), seed=8, max_steps=30),
    ]
    report = judge_episodes(eps, minijudge, per_frame=True, stride=3)
    rows = report["episodes"]
    assert [r["oracle_success"] for r in rows] == [True, False]
    assert rows[0]["judge_prob"] > rows[1]["judge_prob"]
    assert report["agreement"]["n_pos"] == 1 and report["agreement"]["n_neg"] == 1
    assert 0 <= report["frame_agreement"]["accuracy"] <= 100
    with pytest.raises(ConfigError, match="no episodes"):
        judge_episodes([], minijudge)


def test_wrapper_gives_sparse_judge_reward(minijudge) -> None:
    env = JudgeReward(
        sim.make("mujoco:arm_reach", terminate_on_success=False),
        minijudge,
        template="The robot was instructed to {task}. It has done it.",
    )
    expert = policies.load("expert", env=env.unwrapped, speed=0.25)
    obs, _ = env.reset(seed=5)
    expert.reset()
    probs, rewards, truth = [], [], []
    for _ in range(60):
        obs, reward, _, _, info = env.step(expert.select_action(obs))
        assert reward in (0.0, 1.0)
        assert reward == float(info["judge_prob"] >= minijudge.threshold)
        probs.append(info["judge_prob"])
        rewards.append(reward)
        truth.append(info["success"])
    assert any(truth)
    first = truth.index(True)
    assert np.mean(probs[first:]) > np.mean(probs[: max(1, first // 2)])
    env.close()
    with pytest.raises(ConfigError, match=r"\{task\}"):
        JudgeReward(sim.make("mujoco:arm_reach"), minijudge, template="Did it work?")
