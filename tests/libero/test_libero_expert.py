"""The scripted LIBERO expert, judged by LIBERO's own success check (``check_success``)."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = [pytest.mark.libero, pytest.mark.usefixtures("libero_assets")]

import policies  # noqa: E402
import sim  # noqa: E402
from embodied.errors import ConfigError  # noqa: E402
from embodied.loop import rollout  # noqa: E402


def test_expert_solves_a_libero_object_task_from_an_official_init_state() -> None:
    env = sim.make("libero:libero_object:0", cameras=())
    try:
        expert = policies.load("expert", env=env)
        obs, _ = env.reset(options={"init_state": 0})
        inner = env.unwrapped.raw_env  # type: ignore[attr-defined]
        assert not inner.check_success()
        terminated = False
        for _ in range(env.unwrapped.max_episode_steps):  # type: ignore[attr-defined]
            obs, _, terminated, truncated, _ = env.step(expert.select_action(obs))
            if terminated or truncated:
                break
        assert terminated
        assert inner.check_success()  # LIBERO's own predicate, not the wrapper's flag
        assert inner.env._eval_predicate(("in", "alphabet_soup_1", "basket_1_contain_region"))
    finally:
        env.close()


def test_expert_through_the_loop_replans_every_episode() -> None:
    """Two episodes from two init states: the plan follows the new object poses."""
    env = sim.make("libero:libero_object:5", cameras=())
    try:
        expert = policies.load("expert", env=env)
        results = [rollout(env, expert, seed=s) for s in (0, 1)]
        assert [r.success for r in results] == [True, True]
        assert len(results[0].actions) != len(results[1].actions) or not np.array_equal(
            results[0].actions, results[1].actions
        )
    finally:
        env.close()


def _solve(env_id: str, init_state: int) -> object:
    """Run the expert on ``env_id`` from one official init state; return LIBERO's env."""
    env = sim.make(env_id, cameras=())
    expert = policies.load("expert", env=env)
    obs, _ = env.reset(options={"init_state": init_state})
    inner = env.unwrapped.raw_env  # type: ignore[attr-defined]
    assert not inner.check_success()
    info: dict[str, object] = {}
    for _ in range(env.unwrapped.max_episode_steps):  # type: ignore[attr-defined]
        obs, _, terminated, truncated, info = env.step(expert.select_action(obs))
        if terminated or truncated:
            break
    assert info["success"]
    assert inner.check_success()  # LIBERO's own predicate, not the wrapper's flag
    return env


def test_expert_opens_a_drawer_from_an_official_init_state() -> None:
    """libero_goal 0, (Open wooden_cabinet_1_middle_region): grasp the handle and pull."""
    env = _solve("libero:libero_goal:0", 1)
    try:
        inner = env.unwrapped.raw_env.env  # type: ignore[attr-defined]
        assert inner._eval_predicate(("open", "wooden_cabinet_1_middle_region"))
    finally:
        env.close()  # type: ignore[attr-defined]


def test_expert_puts_the_bowl_on_the_plate_from_an_official_init_state() -> None:
    """libero_goal 8, (On akita_black_bowl_1 plate_1): a rim grasp, 3 cm on the plate."""
    env = _solve("libero:libero_goal:8", 0)
    try:
        inner = env.unwrapped.raw_env.env  # type: ignore[attr-defined]
        assert inner._eval_predicate(("on", "akita_black_bowl_1", "plate_1"))
    finally:
        env.close()  # type: ignore[attr-defined]


def test_expert_rejects_unknown_options_and_goals() -> None:
    env = sim.make("libero:libero_goal:7", cameras=())  # turn on the stove
    try:
        with pytest.raises(ConfigError, match="approach_height"):
            policies.load("expert", env=env, approach_heigth_m=0.1)
        with pytest.raises(ConfigError, match="turnon") as err:
            policies.load("expert", env=env)
        assert "use the scripted expert on" in str(err.value.fix)
    finally:
        env.close()
