"""The explicit episode grid and the evaluation config's validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from embodied.apps.evaluation import EvalConfig, EvalVariant, build_grid
from embodied.errors import ConfigError, UnknownNameError


def test_grid_is_task_x_episode_x_variant_with_paired_seeds() -> None:
    cfg = EvalConfig(
        envs=("mujoco:reach_around", "mujoco:arm_reach", "mujoco:reach_around"),
        episodes=3,
        seed=100,
        video_episodes=(2, 0, 2),
        out="runs/grid",  # videos need a folder (the grid writes nothing)
        variants=(EvalVariant("a"), EvalVariant("b")),
    )
    assert cfg.env_ids == ("mujoco:reach_around", "mujoco:arm_reach")  # duplicates dropped
    specs = build_grid(cfg)
    assert len(specs) == 2 * 2 * 3
    assert [s.index for s in specs] == list(range(12))
    first = [s for s in specs if s.env_id == "mujoco:reach_around"]
    assert [(s.variant, s.episode, s.seed) for s in first] == [
        (v, k, 100 + k) for v in ("a", "b") for k in range(3)
    ]
    assert all(s.init_state is None and s.reset_options == {} for s in specs)
    assert all(s.group == s.env_id for s in specs)
    assert [s.record_video for s in first[:3]] == [True, False, True]
    assert cfg.video_episodes == (0, 2)


def test_default_episodes_without_a_protocol_is_ten() -> None:
    assert len(build_grid(EvalConfig("mujoco:reach_around"))) == 10


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"envs": ()}, "at least one env"),
        ({"episodes": 0}, "episodes=0 must be >= 1"),
        ({"workers": -1}, "workers"),
        ({"video_episodes": (-1,)}, "video_episodes"),
        ({"max_steps": 0}, "max_steps"),
        ({"start_method": "fork"}, "'fork'"),
        ({"variants": (EvalVariant("a"), EvalVariant("a"))}, "unique"),
        ({"max_retries": -1}, "max_retries"),
    ],
)
def test_bad_config_values_are_named(kwargs: dict, needle: str) -> None:
    base = {"envs": "mujoco:reach_around", **kwargs}
    with pytest.raises(ConfigError) as info:
        EvalConfig(**base)
    assert needle in str(info.value)


def test_bad_variants_and_unknown_envs() -> None:
    with pytest.raises(ConfigError, match="seed"):
        EvalVariant("x", rollout_kwargs={"seed": 1})
    with pytest.raises(ConfigError, match="'a/b'"):
        EvalVariant("a/b")
    with pytest.raises(UnknownNameError, match="reach_around"):
        build_grid(EvalConfig("mujoco:fly"))
    with pytest.raises(UnknownNameError, match="mujoco"):
        build_grid(EvalConfig("gazebo:fly"))
    assert isinstance(EvalConfig("mujoco:reach_around", out="x").out, Path)


@pytest.mark.libero
def test_libero_suite_expands_to_tasks_with_fixed_init_states() -> None:
    specs = build_grid(EvalConfig("libero:libero_spatial", video_episodes=(0,), out="runs/grid"))
    assert len(specs) == 10 * 50  # protocol default: 50 trials per task
    assert {s.env_id for s in specs} == {f"libero:libero_spatial:{i}" for i in range(10)}
    assert {s.group for s in specs} == {"libero:libero_spatial"}
    task3 = [s for s in specs if s.env_id == "libero:libero_spatial:3"]
    assert [s.init_state for s in task3] == list(range(50))
    assert task3[7].reset_options == {"init_state": 7} and task3[7].seed == 7
    assert sum(s.record_video for s in specs) == 10
    more = build_grid(
        EvalConfig("libero:libero_goal:open_the_middle_drawer_of_the_cabinet", episodes=60)
    )
    assert {s.env_id for s in more} == {"libero:libero_goal:0"}
    assert more[55].init_state == 5  # wraps around the 50 fixed states
    with pytest.raises(UnknownNameError, match="libero_spatial"):
        build_grid(EvalConfig("libero:libero_spatail"))
    from sim.libero import LiberoProtocol

    short = EvalConfig(
        "libero:libero_10:2", env_kwargs={"libero": {"protocol": LiberoProtocol(trials_per_task=5)}}
    )
    assert len(build_grid(short)) == 5  # the protocol's trials per task
