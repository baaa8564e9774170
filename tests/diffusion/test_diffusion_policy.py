"""PDP as an embodied Policy/Steerable on the real mujoco:reach_around env."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import policies
import sim
from embodied.apps.evaluation import PolicyLoader
from embodied.chunking import ChunkingConfig
from embodied.contracts import Steerable
from embodied.errors import CompatibilityError, ConfigError
from embodied.loop import rollout
from policies.diffusion.modeling_denoiser import ZFiLM
from policies.diffusion.modeling_pdp import PDPModel
from policies.diffusion.policy_pdp import PDPPolicy, prior_z
from tests.diffusion.conftest import tiny_config


def _reach_policy(z_dim: int = 2, film_scale: float = 0.0) -> PDPPolicy:
    torch.manual_seed(0)
    model = PDPModel(tiny_config(state_dim=8, z_dim=z_dim))
    model.normalizer.set_stats(
        state_min=-0.4 * np.ones(8),
        state_max=0.4 * np.ones(8),
        action_min=-0.5 * np.ones(2),
        action_max=0.5 * np.ones(2),
    )
    if film_scale:
        for m in model.denoiser.modules():
            if isinstance(m, ZFiLM) and m.proj is not None:
                torch.nn.init.normal_(m.proj.weight, std=film_scale)
    return PDPPolicy(model)


def test_knob_contract() -> None:
    policy = _reach_policy()
    assert isinstance(policy, Steerable)
    knob = policy.knobs()["z"]
    assert knob.size == 2 and knob.low == (-3.0, -3.0) and knob.high == (3.0, 3.0)
    np.testing.assert_array_equal(policy.get_knob("z"), [0.0, 0.0])
    policy.set_knob("z", [1.0, -2.0])
    np.testing.assert_array_equal(policy.get_knob("z"), [1.0, -2.0])
    with pytest.raises(ConfigError, match="outside"):
        policy.set_knob("z", [4.0, 0.0])
    with pytest.raises(ConfigError, match="non-finite"):
        policy.set_knob("z", [np.nan, 0.0])
    with pytest.raises(ConfigError, match="2 value"):
        policy.set_knob("z", [0.0])
    assert _reach_policy(z_dim=0).knobs() == {}


def test_rollout_on_real_env_and_z_changes_actions() -> None:
    env = sim.make("mujoco:reach_around")
    policy = _reach_policy(film_scale=0.5)
    ep = rollout(env, policy, seed=3, max_steps=20, record_images=False)
    assert ep.actions.shape == (20, 2) and np.isfinite(ep.actions).all()
    assert np.abs(ep.actions).max() <= 0.5 + 1e-9  # unnormalised into the action range
    np.testing.assert_array_equal(ep.knobs["z"], np.zeros((20, 2)))
    obs, _ = env.reset(seed=3)
    chunks = []
    for z in ([-2.0, 2.0], [2.0, -2.0]):
        policy.reset()
        policy.set_knob("z", z)
        chunks.append(policy.predict_action_chunk(obs))
    assert chunks[0].shape == (8, 2)
    assert not np.allclose(chunks[0], chunks[1])
    policy.reset()
    policy.set_knob("z", [-2.0, 2.0])
    np.testing.assert_array_equal(policy.predict_action_chunk(obs), chunks[0])  # seeded noise


def test_receding_horizon_executes_n_action_steps() -> None:
    env = sim.make("mujoco:reach_around")
    policy = _reach_policy()
    calls = []
    orig = policy.predict_action_chunk
    policy.predict_action_chunk = lambda obs: calls.append(1) or orig(obs)  # type: ignore[method-assign]
    rollout(env, policy, seed=0, max_steps=12, record_images=False)
    assert len(calls) == 3  # n_action_steps=4 -> re-plan at steps 0, 4, 8


def test_execute_steps_is_an_inference_option_of_a_saved_policy(tmp_path: Path) -> None:
    """``embodied eval --execute-steps 2`` re-plans a saved policy every 2 steps, in-loop and
    in synchronous chunked execution; the checkpoint's value is the default, and 0 or more
    rows than a chunk holds are refused with the fix."""
    out = tmp_path / "ckpt"
    _reach_policy().save_pretrained(out)
    env = sim.make("mujoco:reach_around")
    cases = ((None, "policy", 3), (2, "policy", 6), (2, "sync", 6), (None, "sync", 2))
    for steps, execution, plans in cases:
        chunking = ChunkingConfig(execution=execution, execute_steps=steps)
        policy = PolicyLoader(str(out), chunking=chunking)(env)
        inner = getattr(policy, "policy", policy)  # AsyncChunks wraps the loaded policy
        calls: list[int] = []
        orig = inner.predict_action_chunk
        inner.predict_action_chunk = lambda obs, o=orig, c=calls: c.append(1) or o(obs)  # type: ignore[method-assign]
        rollout(env, policy, seed=0, max_steps=12, record_images=False)
        assert len(calls) == plans, (steps, execution)
    with pytest.raises(ConfigError, match="execute_steps=9 exceeds the 8 rows"):
        PolicyLoader(str(out), chunking=ChunkingConfig(execute_steps=9))(env)
    with pytest.raises(ConfigError, match="execute_steps.*at least 1"):
        ChunkingConfig(execute_steps=0)


def test_incompatible_env_and_state_refused() -> None:
    policy = _reach_policy()
    policy_small = PDPModel(tiny_config(state_dim=4))
    policy_small.normalizer.set_stats(
        state_min=-np.ones(4), state_max=np.ones(4), action_min=-np.ones(2), action_max=np.ones(2)
    )
    env = sim.make("mujoco:reach_around")
    with pytest.raises(CompatibilityError, match="8"):
        PDPPolicy(policy_small).check_compatible(env)
    with pytest.raises(CompatibilityError, match="state"):
        policy.select_action({"state": np.zeros(5, np.float32)})


def test_registered_name_requires_path() -> None:
    with pytest.raises(ConfigError, match="path="):
        policies.load("pdp")


class _Proportional:
    """A minimal proportional controller (the Controller protocol) for the steering test."""

    def reset(self) -> None:
        pass

    def update(self, measurement: float, setpoint: float, dt: float) -> float:
        return float(np.clip(5.0 * (setpoint - measurement), -3.0, 3.0))


def test_closed_loop_controller_drives_knob_z() -> None:
    from embodied.concepts import make_concept
    from embodied.loop import Steering

    env = sim.make("mujoco:reach_around")
    policy = _reach_policy(film_scale=0.5)
    steering = Steering(
        concept=make_concept("ee_speed"),
        controller=_Proportional(),
        knob="z",
        setpoint=0.3,
        to_knob=lambda c: np.array([c, -c]),
    )
    ep = rollout(env, policy, steering=steering, seed=1, max_steps=10, record_images=False)
    z = ep.knobs["z"]
    assert z.shape == (10, 2)
    np.testing.assert_allclose(z[0], [1.5, -1.5])  # speed 0 at reset -> 5 * 0.3
    np.testing.assert_allclose(z[:, 0], -z[:, 1])
    np.testing.assert_allclose(
        ep.measurements[1:], np.linalg.norm(ep.observations["state"][1:, 2:4], axis=1), atol=1e-5
    )


def test_z_from_the_prior_is_drawn_per_seeded_episode() -> None:
    model = PDPModel(tiny_config())
    model.normalizer.set_stats(
        state_min=-np.ones(4), state_max=np.ones(4), action_min=-np.ones(2), action_max=np.ones(2)
    )
    policy = PDPPolicy(model, z="prior")
    policy.reset()
    policy.seed_episode(11)
    np.testing.assert_allclose(policy.get_knob("z"), prior_z(11, 2))
    policy.seed_episode(12)
    assert not np.allclose(policy.get_knob("z"), prior_z(11, 2))
    assert np.array_equal(PDPPolicy(model).get_knob("z"), np.zeros(2))  # knob: stays at 0
    with pytest.raises(ConfigError, match="z='uniform'"):
        PDPPolicy(model, z="uniform")
    with pytest.raises(ConfigError, match="z_dim=0"):
        dp = PDPModel(tiny_config(z_dim=0))
        dp.normalizer.set_stats(
            state_min=-np.ones(4),
            state_max=np.ones(4),
            action_min=-np.ones(2),
            action_max=np.ones(2),
        )
        PDPPolicy(dp, z="prior")
