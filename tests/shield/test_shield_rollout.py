"""The shield in the loop: a seeded 1-D cliff corridor, relaxation with data, MaskablePPO, I/O.

The corridor (written here, not a project env): position x in {0, ..., 7} m, the cliff at
x = 0 ends the episode (the hazard). The action u in [-1, 1] steps left (u < -1/3), right
(u > 1/3) or stays; a commanded step slips backwards (the opposite step) with probability
0.1, so stepping right at the edge still falls with probability 0.1.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from controllers.shield import (
    ActionSet,
    BinSpec,
    RobustShield,
    ShieldConfig,
    ShieldedEnv,
    ShieldFilter,
    TransitionCounts,
)
from embodied.contracts import ActionFilter, Env, Policy
from embodied.errors import CheckpointError, ConfigError
from embodied.loop import rollout
from embodied.specs import ObservationSpec, VectorSpec
from tests.conftest import require

N_CELLS = 8
SLIP = 0.1
START = 3.0
ACTIONS = ActionSet([[-1.0], [0.0], [1.0]])  # left, stay, right
BINS = (BinSpec("x", tuple(i + 0.5 for i in range(N_CELLS - 1)), "m"),)
HAZARD = {"bad": lambda cell: cell.high["x"] <= 0.5}  # the cell of x = 0


def _move(x: float, u: float, rng: np.random.Generator) -> float:
    step = -1.0 if u < -1 / 3 else (1.0 if u > 1 / 3 else 0.0)
    if step and rng.random() < SLIP:
        step = -step
    return float(np.clip(x + step, 0.0, N_CELLS - 1.0))


class CliffEnv(Env):
    """The corridor as an ``embodied`` env (state [x] in m; cliff at x = 0)."""

    env_id = "test:cliff"
    instruction = "walk the corridor without falling"
    control_rate_hz = 10.0
    max_episode_steps = 40

    def __init__(self) -> None:
        self.observation_spec = ObservationSpec(VectorSpec(("x",), (0.0,), (7.0,), ("m",)))
        self.action_spec = VectorSpec(("u",), (-1.0,), (1.0,), ("1",))
        self.x = START

    def _obs(self) -> dict[str, Any]:
        return {"state": np.array([self.x], np.float32), "instruction": self.instruction}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.x = float((options or {}).get("x0", START))
        return self._obs(), {"success": False, "violation": False}

    def step(self, action: np.ndarray):
        self.x = _move(self.x, float(action[0]), self.np_random)
        fell = self.x == 0.0
        return self._obs(), 0.0, fell, False, {"success": False, "violation": fell}


class RandomPolicy(Policy):
    """Uniform actions in [-1, 1], seeded per episode."""

    action_dim = 1

    def __init__(self) -> None:
        super().__init__()
        self.rng = np.random.default_rng(0)

    def seed_episode(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed + 1000)

    def predict_action_chunk(self, obs: dict[str, Any]) -> np.ndarray:
        return self.rng.uniform(-1.0, 1.0, size=(1, 1))


def _true_p(x: int, a: int) -> np.ndarray:
    """The successor distribution that ``_move`` samples from."""
    p = np.zeros(N_CELLS)
    step = (-1, 0, 1)[a]
    p[int(np.clip(x + step, 0, N_CELLS - 1))] += 1.0 - SLIP if step else 1.0
    if step:
        p[int(np.clip(x - step, 0, N_CELLS - 1))] += SLIP
    return p


def _sampled_counts(per_pair: int, seed: int = 0) -> TransitionCounts:
    """Like ``_explored_counts``, drawn at once from the same distributions (fast for big n)."""
    rng = np.random.default_rng(seed)
    counts = TransitionCounts(N_CELLS, len(ACTIONS))
    for x in range(1, N_CELLS):
        for a in range(len(ACTIONS)):
            counts.counts[x, a] = rng.multinomial(per_pair, _true_p(x, a))
    return counts


def _explored_counts(per_pair: int, seed: int = 0) -> TransitionCounts:
    """Data from the real dynamics: every (cell, action) tried ``per_pair`` times."""
    rng = np.random.default_rng(seed)
    counts = TransitionCounts(N_CELLS, len(ACTIONS))
    for x in range(1, N_CELLS):  # the cliff cell ends episodes: never left again
        for a in range(len(ACTIONS)):
            u = float(ACTIONS[a][0])
            for _ in range(per_pair):
                counts.add(x, a, int(_move(float(x), u, rng)))
    return counts


def _shield(counts: TransitionCounts, **overrides: Any) -> RobustShield:
    config = ShieldConfig(bins=BINS, **{"horizon": 5, "risk_bound": 0.2, "delta": 0.1, **overrides})
    return RobustShield.create(config, HAZARD, ACTIONS, counts=counts)


def _violations(safety: ActionFilter | None, episodes: int) -> int:
    env, policy = CliffEnv(), RandomPolicy()
    fell = 0
    for seed in range(episodes):
        ep = rollout(env, policy, safety=safety, seed=seed, record_images=False,
                     stop_on_success=False)  # fmt: skip
        fell += int(bool(ep.final_info["violation"]))
    return fell


def test_shielded_rollouts_never_fall_while_the_random_policy_does() -> None:
    # 10000 tries per pair: with the (wider) anytime balls 5000 leave even staying at the edge
    # above the risk bound (0.24; 0.155 with bound="fixed_n"), so the edge would be flagged
    shield = _shield(_explored_counts(10_000))
    # at the cliff edge (x = 1) only staying is safe enough: left falls w.p. 0.9, right 0.1
    # plus what the confidence set allows nature over 5 steps
    edge = shield.reset(1)
    assert shield.allowed(edge).tolist() == [False, True, False]
    assert min(shield.risk(edge)[[0, 2]]) > 0.2 >= shield.risk(edge)[1]
    assert not shield.flagged(edge)
    assert shield.allowed(shield.reset(4)).all()  # far from the edge nothing is blocked
    filt = ShieldFilter(shield)
    assert isinstance(filt, ActionFilter)
    assert _violations(None, 30) >= 5  # unshielded: the random walk falls often
    assert _violations(filt, 30) == 0  # shielded at risk 0.2 over 5 steps: never
    # the filter replaced blocked actions (it was really in the loop), nearest allowed = stay
    assert filt.steps > 0
    x1 = {"state": np.array([1.0], np.float32)}
    filt.reset()
    np.testing.assert_array_equal(filt(np.array([-0.9]), x1), [0.0])
    np.testing.assert_array_equal(filt(np.array([0.8]), x1), [0.0])
    assert filt.interventions == 2
    filt.reset()
    x4 = {"state": np.array([4.0], np.float32)}
    np.testing.assert_array_equal(filt(np.array([0.7]), x4), [1.0])  # allowed: snapped only
    assert filt.interventions == 0


def test_explored_counts_follow_the_stated_distribution() -> None:
    counts = _explored_counts(2000)
    estimate = counts.estimate()
    for x, a in [(1, 2), (3, 0), (5, 1)]:
        np.testing.assert_allclose(estimate[x, a], _true_p(x, a), atol=0.03)


def test_the_shield_relaxes_as_counts_grow() -> None:
    """Right at the edge (true risk 0.1) is blocked while the confidence sets are wide."""
    sizes = (5000, 20_000, 100_000, 1_000_000)
    shields = [_shield(_sampled_counts(n)) for n in sizes]
    blocked = [s.fraction_blocked() for s in shields]
    assert all(b <= a for a, b in itertools.pairwise(blocked)), blocked
    assert blocked[-1] < blocked[0], blocked
    right_at_edge = [bool(s.allowed(s.product.initial(1))[2]) for s in shields]
    assert right_at_edge[0] is False and right_at_edge[-1] is True
    risks = [float(s.risk(s.product.initial(1))[2]) for s in shields]
    assert all(b < a for a, b in itertools.pairwise(risks)) and risks[-1] > 0.1, risks


def test_online_learning_counts_observed_transitions() -> None:
    shield = _shield(TransitionCounts(N_CELLS, len(ACTIONS)))
    filt = ShieldFilter(shield, learn=True)
    rollout(CliffEnv(), RandomPolicy(), safety=filt, seed=0, record_images=False,
            stop_on_success=False)  # fmt: skip
    assert shield.counts.counts.sum() == filt.steps - 1  # one transition between two calls
    assert shield.stale
    shield.refresh()
    assert not shield.stale


class DiscreteCliff(gym.Env[np.ndarray, Any]):
    """The corridor as a plain gymnasium env with ``Discrete(3)`` actions."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0.0, 7.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(3)
        self.x = START

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.x = START
        return np.array([self.x], np.float32), {}

    def step(self, action: int):
        self.x = _move(self.x, float(ACTIONS[int(action)][0]), self.np_random)
        return np.array([self.x], np.float32), -abs(self.x - 1.0), self.x == 0.0, False, {}


class CountingShieldedEnv(ShieldedEnv):
    intervened = 0

    def step(self, action: Any):
        out = super().step(action)
        type(self).intervened += int(out[4]["shield_intervened"])
        return out


def test_action_masks_drive_maskable_ppo() -> None:
    require("sb3_contrib")
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.maskable.utils import get_action_masks
    from sb3_contrib.common.wrappers import ActionMasker

    shield = _shield(_explored_counts(5000))
    filt = ShieldFilter(shield)
    env = ActionMasker(CountingShieldedEnv(DiscreteCliff(), filt), filt.action_masks)
    env.reset(seed=0)
    assert get_action_masks(env).tolist() == [True, True, True]  # x = 3: all allowed
    shield.current = shield.product.initial(1)
    assert get_action_masks(env).tolist() == [False, True, False]  # the edge: stay only
    model = MaskablePPO("MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0)
    model.learn(total_timesteps=128)  # the reward pulls it to the edge, the mask holds it
    assert CountingShieldedEnv.intervened == 0  # the policy never proposed a masked action
    mask = np.array([False, True, True])  # MaskablePPO honours any mask it is given
    picks = {int(model.predict(np.array([1.0], np.float32), action_masks=mask)[0])
             for _ in range(50)}  # fmt: skip
    assert picks <= {1, 2}


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    shield = _shield(_explored_counts(1000))
    folder = shield.save(tmp_path / "shield")
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "shield.safetensors"]
    loaded = RobustShield.load(folder)
    np.testing.assert_array_equal(loaded.counts.counts, shield.counts.counts)
    np.testing.assert_array_equal(loaded.allowed_table, shield.allowed_table)
    assert loaded.config == shield.config and loaded.abstraction.propositions == ("bad",)
    assert loaded.abstraction.state_of({"state": np.array([0.2])}) == 0
    (folder / "shield.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(CheckpointError, match="shield"):
        RobustShield.load(folder)


@pytest.mark.parametrize(
    ("key", "value"),
    [("risk_bound", 1.5), ("risk_bound", -0.1), ("delta", 0.0), ("horizon", 0),
     ("horizon", 2.5), ("spec", ""), ("ambiguity", "linf"), ("bound", "fixed")],
)  # fmt: skip
def test_config_refuses_bad_values_naming_key_and_value(key: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=key) as info:
        ShieldConfig(bins=BINS, **{key: value})
    assert repr(value) in str(info.value) and info.value.fix


def test_config_round_trips_through_json() -> None:
    config = ShieldConfig(bins=BINS, horizon=None, risk_bound=0.1)
    assert config.bound == "anytime"  # valid for the shield's adaptively collected counts
    assert ShieldConfig.from_dict(config.to_dict()) == config
    fixed = ShieldConfig(bins=BINS, bound="fixed_n")
    assert ShieldConfig.from_dict(fixed.to_dict()) == fixed
    # a config saved before the option existed loads with the (wider, adaptive-valid) default
    old = {k: v for k, v in fixed.to_dict().items() if k != "bound"}
    assert ShieldConfig.from_dict(old).bound == "anytime"
    with pytest.raises(ConfigError, match="unknown"):
        ShieldConfig.from_dict({**config.to_dict(), "lambda": 0.1})
