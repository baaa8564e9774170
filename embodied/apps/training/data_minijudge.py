"""Training data of the shipped judge: rendered MuJoCo episodes + captions from sim state.

Episodes of ``mujoco:arm_reach`` and ``mujoco:reach_around`` are recorded with the scripted
expert (successes), a stop-short expert (near misses: it halts a few cm from the target),
blocked routes (reach_around failures) and random actions (failures). Every frame gets
captions computed from the simulator state at that frame - what is true (label 1) and what
is false (label 0): whether each cube has been reached, whether the gripper hovers near
it, whether the ball is on the goal, stuck at a wall, and so on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

import policies
import sim
from embodied.contracts import Env, Policy
from embodied.errors import UnknownNameError
from embodied.rewards.demo2reward.demonstrations import LabelledDemonstration, record_demonstration
from embodied.specs import Observation
from sim.mujoco.arm_reach import sample_cube_layout
from sim.mujoco.env import MujocoEnv, as_mujoco_env
from sim.mujoco.reach_around import ROUTES

ARM_COLORS = ("red", "green", "blue", "yellow")
ARM_REACHED_M = 0.025
ARM_NEAR_M = 0.09
BALL_NEAR_M = 0.12


class StopShort(Policy):
    """Wraps an expert and holds still once within ``stop_m`` of the goal (near misses).

    Args:
        expert: The expert policy to follow.
        distance: Returns the current distance to the goal (m) from the env.
        stop_m: Distance (m) at which the policy stops moving.
    """

    def __init__(self, expert: Policy, distance: Callable[[], float], stop_m: float) -> None:
        super().__init__()
        self.expert = expert
        self.action_dim = expert.action_dim
        self.distance = distance
        self.stop_m = float(stop_m)
        self.stopped = False

    def reset(self) -> None:
        """Reset the expert and the stop latch."""
        super().reset()
        self.expert.reset()
        self.stopped = False

    def predict_action_chunk(self, obs: Observation) -> np.ndarray:
        """The expert's action until the stop distance, then zero velocity."""
        action = np.asarray(self.expert.predict_action_chunk(obs), dtype=np.float64)[:1].copy()
        self.stopped = self.stopped or self.distance() < self.stop_m
        if self.stopped:
            action[:, : min(3, self.action_dim)] = 0.0
        return action


@dataclass
class Sample:
    """One training clip: which episode, which step, captions with labels."""

    episode: int
    step: int
    captions: list[tuple[str, bool]]


def _arm_captions(
    info: dict[str, Any], cubes: dict[str, np.ndarray], task: str, rng: np.random.Generator
) -> list[tuple[str, bool]]:
    ee = np.asarray(info["ee_pos"], dtype=np.float64)
    out: list[tuple[str, bool]] = []
    for color in ARM_COLORS:
        top = cubes[color] + (0.0, 0.0, 0.028)
        d = float(np.linalg.norm(top - ee))
        d_xy = float(np.linalg.norm(top[:2] - ee[:2]))
        reached = d < ARM_REACHED_M
        near = d < ARM_NEAR_M
        above = d_xy < 0.03 and ee[2] - top[2] > 0.02
        verb = rng.choice(["reach", "touch", "move the gripper to", "go to"])
        noun = rng.choice(["cube", "block", "box"])
        out += [
            (f"reach the {color} cube", reached),
            (f"{verb} the {color} {noun}", reached),
            (f"the gripper is touching the {color} cube", reached),
            (f"the robot has reached the {color} block", reached),
            (f"the gripper is near the {color} cube but not touching it", near and not reached),
            (f"the arm hovers above the {color} cube", above and not reached),
            (f"the arm is far away from the {color} cube", not near),
        ]
    moving = float(np.linalg.norm(np.asarray(info.get("ee_vel", np.zeros(3))))) > 0.02
    out += [("the robot arm is moving", moving), ("the robot arm is standing still", not moving)]
    out.append(("move the blue ball to the green goal", False))  # other task's instruction
    return out


def _ball_captions(
    info: dict[str, Any], task: str, rng: np.random.Generator
) -> list[tuple[str, bool]]:
    d = float(info.get("goal_dist", 1.0))
    reached = bool(info.get("success", False))
    blocked = bool(info.get("blocked", False))
    y = float(np.asarray(info["ee_pos"])[1])
    verb = rng.choice(["move", "push", "bring"])
    out = [
        (task, reached),
        (f"{verb} the ball to the goal", reached),
        ("the blue ball is on the green goal", reached),
        ("the ball has reached the goal", reached),
        ("the ball is near the goal but has not reached it", (not reached) and d < BALL_NEAR_M),
        ("the ball is far from the goal", d > 0.2),
        ("the ball is stuck at a wall", blocked),
        ("the ball is below the obstacles", y < -0.07),
        ("the ball is above the obstacles", y > 0.07),
        (f"reach the {rng.choice(ARM_COLORS)} cube", False),  # other task's instruction
    ]
    return out


def captions_for(
    episode: LabelledDemonstration, step: int, rng: np.random.Generator
) -> list[tuple[str, bool]]:
    """Captions with truth labels for frame ``step`` of a live-recorded episode."""
    info = episode.infos[step]
    if episode.env_id == "mujoco:arm_reach":
        return _arm_captions(info, episode.meta["cubes"], episode.task, rng)
    return _ball_captions(info, episode.task, rng)


ARM_KINDS = ("expert", "near", "near", "random")
BALL_KINDS = ("expert", "near", "blocked", "random")


def _recording_env(
    env_id: str, seed0: int, image_size: int | None, **make_options: Any
) -> tuple[Env, np.random.Generator, Any]:
    """The env labelled episodes are recorded in, the generator of their random choices
    (seeded ``seed0``) and the env's task.

    Episodes run past success (``terminate_on_success=False``) so that holds and overshoots
    are recorded too; ``image_size`` None keeps the env's default camera size (px).
    """
    env = sim.make(
        env_id,
        **make_options,
        terminate_on_success=False,
        **({"image_size": image_size} if image_size else {}),
    )
    rng = np.random.default_rng(seed0)
    task: Any = env.unwrapped.task  # type: ignore[attr-defined]
    return env, rng, task


def _arm_episodes(
    n: int, seed0: int, image_size: int | None, kinds: tuple[str, ...] = ARM_KINDS
) -> Iterator[LabelledDemonstration]:
    env, rng, task = _recording_env("mujoco:arm_reach", seed0, image_size)
    for i in range(n):
        seed = seed0 + i
        kind = kinds[i % len(kinds)]
        expert = env.unwrapped.expert(speed=float(rng.uniform(0.08, 0.25)))  # type: ignore[attr-defined]
        policy: Policy = expert
        if kind in ("near", "hover"):  # hover: stops just above the target, 2.8-4 cm away
            lo, hi = (0.035, 0.08) if kind == "near" else (0.028, 0.04)
            policy = StopShort(expert, partial(_arm_target_dist, task), float(rng.uniform(lo, hi)))
        elif kind == "random":
            policy = policies.load("random", env=env, seed=seed)
        options: dict[str, Any] = {}
        named: str | None = None
        if kind == "swap":  # 4 episodes in a row: one layout, the colours rotated over it
            group_rng = np.random.default_rng(seed0 + i // 4)
            layout = sample_cube_layout(group_rng)
            speed = float(group_rng.uniform(0.08, 0.25))
            policy = env.unwrapped.expert(speed=speed)  # type: ignore[attr-defined]
            shift = i % 4
            colors = ARM_COLORS[shift:] + ARM_COLORS[:shift]
            options = {
                "cubes": dict(zip(colors, layout.tolist(), strict=True)),
                "target": colors[0],
            }
        elif kind == "wrong":  # the expert reaches cube B while the instruction names cube A
            reached, named = (str(c) for c in rng.choice(ARM_COLORS, 2, replace=False))
            options = {"target": reached}
        episode = record_demonstration(
            env,
            policy,
            seed,
            # hold lengths overlap between kinds, so "still for long" is no shortcut for failure
            max_steps=int(rng.integers(50, 121))
            if kind not in ("expert", "wrong", "swap")
            else 150,
            steps_after_success=int(rng.integers(5, 61)),
            reset_options=options,
            task=f"reach the {named} cube" if named else None,
        )
        if named:  # the named cube is never reached: every frame is a failure of the task
            episode.labels[:] = False
        episode.meta["cubes"] = {c: task.cube_pos[j].copy() for j, c in enumerate(ARM_COLORS)}
        episode.meta["kind"] = kind
        yield episode
    env.close()


def _ball_goal_dist(task: Any) -> float:
    """Ball-to-goal distance (m) from the reach_around task state."""
    return float(np.hypot(task._xv[0] - task.goal[0], task._xv[1] - task.goal[1]))


def _arm_target_dist(task: Any) -> float:
    """Fingertip-to-target distance (m) from the arm_reach task state."""
    return float(np.linalg.norm(task.target_point() - task.ee_pos))


def _ball_episodes(
    n: int, seed0: int, image_size: int | None, kinds: tuple[str, ...] = BALL_KINDS
) -> Iterator[LabelledDemonstration]:
    env, rng, task = _recording_env("mujoco:reach_around", seed0, image_size, camera=True)
    for i in range(n):
        seed = seed0 + i
        kind = kinds[i % len(kinds)]
        route = str(rng.choice(ROUTES))
        expert = env.unwrapped.expert(route=route)  # type: ignore[attr-defined]
        policy: Policy = expert
        options: dict[str, Any] = {}
        if kind == "near":
            policy = StopShort(
                expert, partial(_ball_goal_dist, task), float(rng.uniform(0.045, 0.1))
            )
        elif kind == "blocked":
            options = {"scene": f"block_{route}"}
        elif kind == "random":
            policy = policies.load("random", env=env, seed=seed)
        episode = record_demonstration(
            env,
            policy,
            seed,
            max_steps=int(rng.integers(60, 121)),
            reset_options=options,
            steps_after_success=int(rng.integers(5, 61)),
        )
        episode.meta["kind"] = kind
        yield episode
    env.close()


EPISODE_SOURCES = {"mujoco:arm_reach": _arm_episodes, "mujoco:reach_around": _ball_episodes}
"""Env id -> recorder of labelled episodes of mixed kinds."""


def record_episodes(
    env_id: str,
    n: int,
    seed0: int,
    kinds: Sequence[str] | None = None,
    image_size: int | None = None,
) -> list[LabelledDemonstration]:
    """Record ``n`` labelled episodes of ``env_id`` cycling through ``kinds``.

    Kinds: ``expert`` (succeeds, holds a few steps), ``near`` (stops 3.5-10 cm short),
    ``wrong`` (arm_reach: the expert reaches another cube than the instruction names),
    ``swap`` (arm_reach: groups of 4 expert episodes over one cube layout with the colours
    rotated, so only the colour under the gripper tells them apart),
    ``hover`` (arm_reach: stops 2.8-4 cm above the target, just outside the success radius),
    ``blocked`` (reach_around: the chosen passage is walled off), ``random``.

    Raises:
        UnknownNameError: an env without a recorder.
    """
    if env_id not in EPISODE_SOURCES:
        raise UnknownNameError(
            f"no labelled-episode recorder for {env_id!r}; known: {sorted(EPISODE_SOURCES)}",
            fix="use a built-in mujoco task",
        )
    fn = EPISODE_SOURCES[env_id]
    if kinds is None:
        return list(fn(n, seed0, image_size))
    return list(fn(n, seed0, image_size, tuple(kinds)))


def make_demonstrations(
    n_arm: int, n_ball: int, seed0: int = 0, image_size: int | None = None
) -> list[LabelledDemonstration]:
    """Record ``n_arm`` arm_reach and ``n_ball`` reach_around episodes (mixed kinds).

    Args:
        n_arm: arm_reach episodes (expert, 2 near misses, random - repeating).
        n_ball: reach_around episodes (expert, near miss, blocked, random - repeating).
        seed0: First reset seed (training and evaluation use disjoint ranges).
        image_size: Camera size override in pixels (default: each task's default).
    """
    return [*_arm_episodes(n_arm, seed0, image_size), *_ball_episodes(n_ball, seed0, image_size)]


def make_samples(
    episodes: list[LabelledDemonstration], stride: int, rng: np.random.Generator
) -> list[Sample]:
    """Samples every ``stride`` frames of every episode, with their captions."""
    out = []
    for i, episode in enumerate(episodes):
        for t in range(0, len(episode), stride):
            out.append(Sample(i, t, captions_for(episode, t, rng)))
    return out


_PROJECTORS: dict[str, MujocoEnv] = {}


def keypoints_uv(episode: LabelledDemonstration, size: int) -> np.ndarray:
    """Pixel (u = column, v = row) of the fingertip (arm_reach) or the ball (reach_around)
    in every frame of ``episode``, in a ``size`` x ``size`` resize of its frames.

    Computed from the recorded ``info["ee_pos"]`` and the env's default camera, which is fixed
    in both tasks (so one env per task, built once, projects every episode).
    """
    env = _PROJECTORS.get(episode.env_id)
    if env is None:
        # no camera: projecting needs the camera pose, not a GL context kept alive in a cache
        env = as_mujoco_env(sim.make(episode.env_id, camera=False))
        env.reset(seed=0)
        _PROJECTORS[episode.env_id] = env
    points = np.array([np.asarray(info["ee_pos"], dtype=np.float64) for info in episode.infos])
    uv, _ = env.project(points)
    h, w = env.image_size
    return uv * np.array([size / w, size / h])


def first_env_success(episode: LabelledDemonstration) -> int:
    """First frame where the env reported success (for ``wrong`` episodes: the other cube),
    or -1."""
    hits = [t for t, info in enumerate(episode.infos) if info.get("success")]
    return hits[0] if hits else -1


def arrival_steps(episode: LabelledDemonstration, before: int = 0, after: int = 2) -> list[int]:
    """Frames around the moment the env first reports success: ``before`` frames before it
    and ``after`` frames from it on. A rollout that stops at success ends on such a frame,
    so the judge must get exactly these right, not only the frames of a long hold."""
    first = first_env_success(episode)
    if first < 0:
        return []
    return [t for t in range(first - before, first + after) if 0 <= t < len(episode)]
