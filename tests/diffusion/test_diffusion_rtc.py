"""Real-time chunking for the diffusion policies: the soft mask, the guided sampler, the cap,
and asynchronous execution that inpaints toward the chunk still executing."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from embodied.chunking import AsyncChunks
from embodied.errors import ConfigError
from policies.diffusion.policy_pdp import PDPPolicy
from policies.diffusion.rtc import RTCConfig, prefix_weights
from policies.diffusion.training_pdp import train_pdp
from tests.diffusion.conftest import synthetic_demonstrations, tiny_config


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> PDPPolicy:
    out = tmp_path_factory.mktemp("rtc_pdp")
    cfg = tiny_config(z_dim=0, n_obs_steps=1, horizon=8, n_action_steps=4, steps=30, batch_size=16)
    train_pdp(synthetic_demonstrations(), out, cfg, progress=False, tensorboard=False)
    return PDPPolicy.from_pretrained(out)


def test_prefix_weights_follow_the_paper() -> None:
    """Eq. 5: 1 on the frozen rows, c * (e^c - 1) / (e - 1) over the overlap with
    c = (overlap - i) / (overlap - delay + 1), 0 after; linear (lerobot's default) uses c."""
    c = np.array([4, 3, 2, 1]) / 5.0
    exp = prefix_weights(2, 6, 8, "exp").numpy()
    np.testing.assert_allclose(exp, [1, 1, *(c * np.expm1(c) / (math.e - 1)), 0, 0], rtol=1e-6)
    np.testing.assert_allclose(
        prefix_weights(2, 6, 8, "linear").numpy(), [1, 1, *c, 0, 0], rtol=1e-6
    )
    np.testing.assert_array_equal(prefix_weights(2, 6, 8, "ones").numpy(), [1] * 6 + [0, 0])
    np.testing.assert_array_equal(prefix_weights(2, 6, 8, "zeros").numpy(), [1, 1] + [0] * 6)
    # delay beyond the overlap, overlap beyond the horizon: clamped
    np.testing.assert_array_equal(prefix_weights(5, 3, 8).numpy(), [1] * 5 + [0] * 3)
    np.testing.assert_array_equal(prefix_weights(0, 20, 4, "ones").numpy(), [1] * 4)
    with pytest.raises(ConfigError, match="schedule='cosine'"):
        RTCConfig(schedule="cosine")
    with pytest.raises(ConfigError, match="max_guidance_weight=0"):
        RTCConfig(max_guidance_weight=0)


def _chunks(
    policy: PDPPolicy, obs: dict, prefix: np.ndarray, delay: int
) -> tuple[np.ndarray, np.ndarray]:
    policy.reset()
    plain = policy.fresh_chunk(obs)
    policy.reset()  # the same sampling noise for the guided chunk
    return plain, policy.guided_chunk(obs, prefix, delay)


def test_guidance_inpaints_the_frozen_rows_toward_the_prefix(policy: PDPPolicy) -> None:
    obs = {"state": np.array([0.1, -0.9, 0.5, 1.0])}
    policy.reset()
    target = policy.fresh_chunk(obs)[::-1].copy()  # another plausible chunk: time-reversed
    plain, guided = _chunks(policy, obs, target[:6], delay=3)
    err_plain = np.abs(plain[:3] - target[:3]).mean()
    err_guided = np.abs(guided[:3] - target[:3]).mean()
    assert err_guided < 0.5 * err_plain, (err_guided, err_plain)
    # the cap bounds the guidance: a tiny cap leaves the chunk as it was
    policy.rtc = RTCConfig(max_guidance_weight=1e-6)
    try:
        plain, barely = _chunks(policy, obs, target[:6], delay=3)
    finally:
        policy.rtc = RTCConfig()
    np.testing.assert_allclose(barely, plain, atol=1e-3)


def test_async_execution_with_rtc_guides_with_the_remaining_rows(policy: PDPPolicy) -> None:
    calls: list[tuple[int, int]] = []
    original = policy.guided_chunk

    def spy(obs: dict, prefix: np.ndarray, delay: int) -> np.ndarray:
        calls.append((len(prefix), delay))
        return original(obs, prefix, delay)

    policy.guided_chunk = spy  # type: ignore[method-assign]
    try:
        runner = AsyncChunks(policy, threshold=0.5, delay_steps=2, rtc=True, merge="latest_only")
        runner.reset()
        for t in range(20):
            action = runner.select_action({"state": np.array([0.0, -1.0 + 0.1 * t, 0.0, 1.0])})
            assert action.shape == (2,) and np.isfinite(action).all()
    finally:
        del policy.guided_chunk
    # 8-row chunks asked for with 4 left, 2 steps of delay: guided by the 4 remaining rows
    assert calls and all(c == (4, 2) for c in calls)
    assert runner.stats.missed_periods == 2  # only the first chunk is waited for
    with pytest.raises(ConfigError, match="has no real-time chunking"):
        from tests.core.test_core_chunking import Clock

        AsyncChunks(Clock(), rtc=True)


def test_guided_sampling_keeps_torch_out_of_inference_mode(policy: PDPPolicy) -> None:
    assert not torch.is_inference_mode_enabled()
    _chunks(policy, {"state": np.zeros(4)}, np.zeros((4, 2)), delay=2)
