"""A gymnasium wrapper that turns any judge into a sparse reward for RL.

    env = JudgeReward(sim.make("mujoco:arm_reach"), load_judge("minijudge"))
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(action)  # reward in {0, 1}

Each step the wrapper keeps the camera frame, builds the clip (4 earlier frames evenly
spaced over the episode + the current one) and asks the judge; the reward is 1 when the
judge's probability reaches its threshold, else 0. ``info`` gets ``judge_prob``,
``judge_success`` and the env's own reward as ``env_reward``.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from embodied.contracts import Judge
from embodied.errors import ConfigError
from embodied.rewards.clips import context_indices, format_instruction
from embodied.rewards.demo2reward.demonstrations import task_text


class JudgeReward(gym.Wrapper):  # type: ignore[type-arg]
    """Replace (or add to) the env reward with a judge's sparse success reward.

    Args:
        env: An ``embodied`` env with a camera (observations ``image.<camera>``) or ``render()``.
        judge: Any :class:`~embodied.contracts.Judge`.
        template: Instruction template with ``{task}`` (default: the task itself), e.g. one
            frozen by Demo2Reward.
        task: Task text (default: the env's instruction, or its fallback).
        camera: Camera to judge (default: the first image key, else ``env.render()``).
        threshold: Decision threshold (default: the judge's calibrated one).
        every: Judge every ``every`` steps (the reward holds in between); 1 = every step.
        terminate_on_success: End the episode when the judge says success.
        add_env_reward: Add the env's reward instead of replacing it.

    Raises:
        ConfigError: a template without ``{task}``, or ``every`` < 1.
    """

    def __init__(
        self,
        env: gym.Env,  # type: ignore[type-arg]
        judge: Judge,
        template: str | None = None,
        task: str | None = None,
        camera: str | None = None,
        threshold: float | None = None,
        every: int = 1,
        terminate_on_success: bool = False,
        add_env_reward: bool = False,
    ) -> None:
        super().__init__(env)
        if template is not None:
            format_instruction(template, "check")
        if every < 1:
            raise ConfigError(f"every must be >= 1, got {every}")
        self.judge = judge
        self.template = template
        self.task = task
        self.camera = camera
        self.threshold = float(getattr(judge, "threshold", 0.5) if threshold is None else threshold)
        self.every = int(every)
        self.terminate_on_success = terminate_on_success
        self.add_env_reward = add_env_reward
        self.n_context = int(getattr(judge, "n_frames", 5)) - 1
        self._frames: list[np.ndarray] = []
        self._last = (0.0, False)
        self._text = ""

    def _frame(self, obs: Any) -> np.ndarray:
        if isinstance(obs, dict):
            key = (
                f"image.{self.camera}"
                if self.camera
                else next((k for k in sorted(obs) if k.startswith("image.")), None)
            )
            if key is not None and key in obs:
                return np.asarray(obs[key])
        frame = self.env.render()
        if frame is None:
            raise ConfigError(
                "the env gives no camera frame for the judge",
                fix="enable a camera on the env (camera=True)",
            )
        return np.asarray(frame)

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """Reset the env and the frame history."""
        obs, info = self.env.reset(**kwargs)
        base = self.env.unwrapped
        task = self.task or task_text(
            str(getattr(base, "instruction", "")), str(getattr(base, "env_id", ""))
        )
        self._text = format_instruction(self.template, task) if self.template else task
        self._frames = [self._frame(obs)]
        self._last = (0.0, False)
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step the env, judge the new clip, return the sparse reward."""
        obs, env_reward, terminated, truncated, info = self.env.step(action)
        self._frames.append(self._frame(obs))
        t = len(self._frames) - 1
        if t % self.every == 0 or t == 1:
            clip = np.stack([self._frames[i] for i in context_indices(t, self.n_context)])
            prob = float(self.judge.score(clip, self._text))
            self._last = (prob, prob >= self.threshold)
        prob, success = self._last
        info = dict(info)
        info.update(judge_prob=prob, judge_success=success, env_reward=float(env_reward))
        reward = float(success) + (float(env_reward) if self.add_env_reward else 0.0)
        if self.terminate_on_success and success:
            terminated = True
        return obs, reward, terminated, truncated, info
