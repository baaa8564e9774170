"""RePPO (controllers.rl.reppo): m = 1 is PPO, the ReMax advantage, save/load, the experiment."""

from __future__ import annotations

import json
import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from stable_baselines3 import PPO

from controllers.rl.reppo import QActorCriticPolicy, RePPO, expected_improvement, remax_advantage
from embodied.errors import ConfigError
from tests.conftest import require


def _model(cls: type, **kwargs: object) -> PPO:
    policy = QActorCriticPolicy if cls is PPO else "MlpPolicy"
    return cls(  # type: ignore[no-any-return]
        policy,
        gym.make("CartPole-v1"),
        n_steps=64,
        batch_size=32,
        n_epochs=2,
        seed=3,
        device="cpu",
        policy_kwargs={"net_arch": [16]},
        **kwargs,
    )


def test_m_equal_1_is_ppo_bit_for_bit() -> None:
    # create and train one after the other: both reseed the global RNGs at construction
    ppo = _model(PPO)
    before = [p.detach().clone() for p in ppo.policy.parameters()]
    ppo.learn(128)
    reppo = _model(RePPO, m=1.0)
    reppo.learn(128)
    pairs = list(zip(ppo.policy.parameters(), reppo.policy.parameters(), strict=True))
    assert all(th.equal(a, b) for a, b in pairs)
    assert any(not th.equal(a, b) for a, b in zip(before, ppo.policy.parameters(), strict=True))
    # and m > 1 changes the update
    other = _model(RePPO, m=3.0)
    other.learn(128)
    assert any(
        not th.equal(a, b)
        for a, b in zip(ppo.policy.parameters(), other.policy.parameters(), strict=True)
    )


def test_remax_advantage_at_m_1_is_return_minus_value() -> None:
    # our extension (ppo_at_m1); the default at m = 1 is the reference formula (fixture test)
    g = th.Generator().manual_seed(0)
    q = th.randn(32, 4, generator=g)
    pi = th.softmax(th.randn(32, 4, generator=g), dim=-1)
    returns = th.randn(32, generator=g) * 3  # some below min_a q: not floored
    actions = th.randint(0, 4, (32,), generator=g)
    for replace in (True, False):
        adv = remax_advantage(returns, q, pi, actions, 1.0, replace_q=replace, ppo_at_m1=True)
        assert th.allclose(adv, returns - (pi * q).sum(-1))


def test_expected_improvement_hand_computed() -> None:
    # actions sorted by q: 2 (p .5), 1 (p .3), 0 (p .2); C = .5, .8, 1
    q = th.tensor([[0.0, 1.0, 2.0]])
    pi = th.tensor([[0.2, 0.3, 0.5]])
    x = th.tensor([[1.5]])
    # m = 2 (one retry A ~ pi): E[(1.5 - q_A)_+] = .5*0 + .3*.5 + .2*1.5 = 0.45
    assert expected_improvement(x, q, pi, 2.0).item() == pytest.approx(0.45)
    # m = 3 (two retries): P(best retry is rank k): .75, .21, .04 -> .21*.5 + .04*1.5 = 0.165
    assert expected_improvement(x, q, pi, 3.0).item() == pytest.approx(0.165)
    # continuous m = 2.5: v0 + dv0 (1 - .5)^1.5 + dv1 (1 - .8)^1.5
    expected = 0.5 * 0.5**1.5 + 1.0 * 0.2**1.5
    assert expected_improvement(x, q, pi, 2.5).item() == pytest.approx(expected)


def test_advantage_is_monotone_in_the_return_and_favours_the_top_with_larger_m() -> None:
    q = th.tensor([[0.0, 1.0, 2.0]]).repeat(5, 1)
    pi = th.tensor([[0.2, 0.3, 0.5]]).repeat(5, 1)
    returns = th.tensor([-1.0, 0.5, 1.5, 2.5, 4.0])
    actions = th.zeros(5, dtype=th.long)
    advs = {m: remax_advantage(returns, q, pi, actions, m) for m in (1.0, 2.0, 4.0, 16.0)}
    for adv in advs.values():
        assert th.all(adv[1:] >= adv[:-1])
    # the share of the spread earned by beating the best retries grows with m
    share = {m: ((a[-1] - a[-2]) / (a[-1] - a[0])).item() for m, a in advs.items()}
    assert share[1.0] < share[2.0] < share[4.0] < share[16.0]
    assert share[16.0] > 0.5


@pytest.mark.parametrize("m", [0.0, -1.0, math.nan, math.inf, "x"])
def test_bad_m_is_refused_naming_the_key_and_the_fix(m: object) -> None:
    with pytest.raises(ConfigError, match="m=") as info:
        RePPO("MlpPolicy", gym.make("CartPole-v1"), m=m, device="cpu")  # type: ignore[arg-type]
    assert "m=1 for plain PPO" in str(info.value)


def test_continuous_actions_are_refused() -> None:
    with pytest.raises(ConfigError, match="Discrete"):
        RePPO("MlpPolicy", gym.make("Pendulum-v1"), device="cpu")


def test_save_load_round_trip_and_logging(tmp_path: Path) -> None:
    model = _model(RePPO, m=2.5, use_current_probs=False)
    model.learn(128)
    logged = model.logger.name_to_value
    assert logged["reppo/m"] == 2.5 and "reppo/expected_improvement" in logged
    model.save(tmp_path / "reppo.zip")
    loaded = RePPO.load(tmp_path / "reppo.zip", device="cpu")
    assert isinstance(loaded.policy, QActorCriticPolicy)
    assert (loaded.m, loaded.replace_q, loaded.use_current_probs) == (2.5, True, False)
    obs = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    a1, _ = model.predict(obs, deterministic=True)
    a2, _ = loaded.predict(obs, deterministic=True)
    assert np.array_equal(a1, a2)
    for a, b in zip(model.policy.parameters(), loaded.policy.parameters(), strict=True):
        assert th.equal(a, b)


def test_smoke_experiment_writes_its_files(tmp_path: Path) -> None:
    require("minatar")
    from embodied.apps.lab.reppo import RePPOExperimentConfig, run_experiment

    cfg = RePPOExperimentConfig.for_budget("smoke")
    summary = run_experiment(tmp_path, cfg)
    for name in ("results.json", "results.md", "curves.png"):
        assert (tmp_path / name).stat().st_size > 0
    data = json.loads((tmp_path / "results.json").read_text())
    assert len(data["runs"]) == len(cfg.envs) * len(cfg.ms) * cfg.seeds
    assert set(data["aggregate"]) == set(cfg.envs) == set(summary["aggregate"])
    for run in data["runs"]:
        assert run["timesteps"] >= cfg.total_timesteps and run["distinct_states"] > 0
    assert "RePPO m=3" in (tmp_path / "results.md").read_text()


def test_experiment_config_refuses_bad_m_and_budget() -> None:
    from embodied.apps.lab.reppo import RePPOExperimentConfig

    with pytest.raises(ConfigError, match="m="):
        RePPOExperimentConfig(ms=(1.0, 0.0))
    with pytest.raises(ConfigError, match="budget"):
        RePPOExperimentConfig.for_budget("huge")


_REFERENCE = Path(__file__).parent / "fixtures" / "reppo_reference_advantage.json"


def _reference_batches(dtype: th.dtype = th.float64) -> list[tuple[dict, tuple[th.Tensor, ...]]]:
    data = json.loads(_REFERENCE.read_text())
    assert data["_provenance"]["reference_repo"] == "github.com/nissymori/remax-rl"
    out = []
    for b in data["batches"]:
        tensors = tuple(th.tensor(b[k], dtype=dtype) for k in ("returns", "q", "pi"))
        out.append((b, (*tensors, th.tensor(b["action"]))))
    return out


def test_remax_advantage_matches_the_reference_code() -> None:
    # values from nissymori/remax-rl agents/minatar/reppo.py's own calc_remax_advantage (JAX,
    # copied verbatim; see the fixture's _provenance), called as the agent does (exponent M-1)
    checked = set()
    for b, (returns, q, pi, actions) in _reference_batches():
        for case in b["cases"]:
            m, replace = case["m"], case["replace_q"]
            q_ref = q.scatter(1, actions.reshape(-1, 1), returns.reshape(-1, 1)) if replace else q
            signal = expected_improvement(returns.reshape(-1, 1), q_ref, pi, m)[:, 0]
            baseline = (pi * expected_improvement(q, q_ref, pi, m)).sum(-1)
            adv = remax_advantage(returns, q, pi, actions, m, replace_q=replace)
            for got, key in ((signal, "signal_R_plus"), (baseline, "baseline"), (adv, "advantage")):
                want = th.tensor(case[key], dtype=th.float64)
                assert th.allclose(got, want, rtol=1e-9, atol=1e-9), (b["seed"], m, replace, key)
            checked.add(m)
    assert {0.5, 1.0, 1.5, 2.0, 4.0} <= checked
    # float32, as in training, against the reference evaluated in float32
    for b, (returns, q, pi, actions) in _reference_batches(th.float32):
        for case in b["cases"]:
            adv = remax_advantage(returns, q, pi, actions, case["m"], replace_q=case["replace_q"])
            want = th.tensor(case["advantage_float32"], dtype=th.float32)
            assert th.allclose(adv, want, rtol=1e-5, atol=1e-5), (b["seed"], case["m"])


def test_m_1_arm_is_not_the_limit_m_to_1() -> None:
    # the formula is continuous at m = 1, but PPO's advantage (our m = 1 arm) is not its limit:
    # with replace_q they differ by pi_a (min q' - q_a)_+ (module docstring)
    jumps = []
    for _, (returns, q, pi, actions) in _reference_batches():
        ppo = remax_advantage(returns, q, pi, actions, 1.0, ppo_at_m1=True)
        near = remax_advantage(returns, q, pi, actions, 1.0 + 1e-6)
        at_1 = remax_advantage(returns, q, pi, actions, 1.0)
        assert th.allclose(near, at_1, atol=1e-4)
        idx = actions.reshape(-1, 1)
        q_ref = q.scatter(1, idx, returns.reshape(-1, 1))
        q_taken, pi_taken = q.gather(1, idx)[:, 0], pi.gather(1, idx)[:, 0]
        jump = pi_taken * (q_ref.min(-1).values - q_taken).clamp(min=0)
        assert th.allclose(ppo - near, jump, atol=1e-4)
        jumps.append(jump.max().item())
    assert max(jumps) > 0.1  # 0.101 on the fixture's first batch
