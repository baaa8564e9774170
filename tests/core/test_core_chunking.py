"""Asynchronous chunk execution: schedule, merge rules, stale rows and chunks, missed periods."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from embodied.chunking import MERGE_RULES, AsyncChunks
from embodied.contracts import Policy
from embodied.errors import ConfigError


class Clock(Policy):
    """Row k of the chunk planned at step t0 is the number 100 * t0 + k (and its request
    count), so every executed action says which chunk and row it came from."""

    action_dim = 1

    def __init__(self, horizon: int = 4, gate: threading.Event | None = None) -> None:
        super().__init__()
        self.horizon, self.gate, self.asked = horizon, gate, 0

    def predict_action_chunk(self, obs: dict[str, Any]) -> np.ndarray:
        if self.gate is not None:
            assert self.gate.wait(30)
        self.asked += 1
        t0 = int(obs["state"][0])
        return (100.0 * t0 + np.arange(self.horizon, dtype=float))[:, None]


def _run(policy: AsyncChunks, steps: int) -> list[float]:
    policy.reset()
    return [float(policy.select_action({"state": np.array([t])})[0]) for t in range(steps)]


def test_synchronous_without_delay_is_the_plain_receding_horizon() -> None:
    sync = AsyncChunks(Clock(4), threshold=0.0, delay_steps=0)
    assert _run(sync, 9) == [0, 1, 2, 3, 400, 401, 402, 403, 800]
    assert sync.stats.missed_periods == 0 and sync.stats.requests == 3


def test_synchronous_with_delay_waits_then_runs_the_chunk_from_its_start() -> None:
    """The robot idles d steps per chunk (missed periods, zeros sent), then the chunk executes
    from its first row: nothing moved while it waited."""
    sync = AsyncChunks(Clock(4), threshold=0.0, delay_steps=2, starve="zeros")
    assert _run(sync, 12) == [0, 0, 0, 1, 2, 3, 0, 0, 600, 601, 602, 603]
    assert sync.stats.missed_periods == 4 and sync.stats.dropped_rows == 0


def test_asynchronous_requests_early_drops_passed_rows_and_merges_overlaps() -> None:
    """Threshold 0.5 of a 4-row chunk: ask with 2 left; with a 1-step delay the new chunk's
    first row is stale and its second overlaps the old chunk's last row (merged by rule)."""
    for merge, rule in MERGE_RULES.items():
        policy = AsyncChunks(Clock(4), threshold=0.5, delay_steps=1, merge=merge)
        actions = _run(policy, 8)
        # step 0: idle, ask; the chunk arrives at step 1 and starts there (the robot waited)
        assert actions[:4] == [0, 0, 1, 2]
        # step 3: 2 left, ask (t0 = 3); at step 4 its row 0 (step 3) is stale, row 1 meets
        # the old chunk's last row
        assert actions[4] == pytest.approx(float(rule(np.array(3.0), np.array(301.0))))
        assert actions[5] == 302
        assert actions[6] == pytest.approx(float(rule(np.array(303.0), np.array(501.0))))
        assert actions[7] == 502
        assert policy.stats.missed_periods == 1  # only the first step waits for a chunk
        assert policy.stats.dropped_rows == 2 and policy.stats.dropped_chunks == 0
        assert policy.stats.boundary_steps == [1, 4, 6]


def test_a_chunk_older_than_its_validity_is_never_executed() -> None:
    """A 2-row chunk asked for at step 4 with a 3-step delay arrives at step 7, when both its
    rows (steps 4 and 5) are past: dropped whole; the idle robot then asks afresh."""
    policy = AsyncChunks(Clock(2), threshold=0.5, delay_steps=3, starve="zeros")
    actions = _run(policy, 12)
    assert actions == [0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 700, 701]
    assert policy.stats.dropped_chunks == 1 and policy.stats.requests == 4  # the 4th at step 11
    assert policy.stats.missed_periods == 8


def test_real_latency_keeps_the_control_rate_while_the_request_runs() -> None:
    """With a worker thread, select_action returns scheduled actions while inference is blocked
    (no wall-clock timing: the policy waits on an event the test controls)."""
    gate = threading.Event()
    gate.set()
    inner = Clock(4, gate)
    policy = AsyncChunks(inner, threshold=0.5)
    policy.reset()
    obs = lambda t: {"state": np.array([t])}  # noqa: E731
    assert policy.select_action(obs(0))[0] == 0  # first chunk: waited for (missed period)
    gate.clear()  # inference now hangs
    assert policy.select_action(obs(1))[0] == 1
    assert policy.select_action(obs(2))[0] == 2  # 2 left: request goes out, does not block
    assert policy.select_action(obs(3))[0] == 3
    assert inner.asked == 1 and policy.stats.requests == 2
    gate.set()
    policy._wait_pending()
    nxt = policy.select_action(obs(4))[0]  # the chunk planned at step 2: row 2 is step 4
    assert nxt == 202 and policy.stats.dropped_rows == 2  # rows of steps 2 and 3 had passed
    policy.close()


def test_history_policies_observe_every_step_and_options_are_checked() -> None:
    seen: list[int] = []

    class WithHistory(Clock):
        history_steps = 2

        def observe(self, obs: dict[str, Any]) -> None:
            seen.append(int(obs["state"][0]))

    _run(AsyncChunks(WithHistory(4), threshold=0.5, delay_steps=1), 6)
    assert seen == list(range(6))  # every step once (request steps by their request)
    for kw, match in (
        ({"threshold": 1.0}, "threshold=1.0"),
        ({"merge": "median"}, "merge='median'"),
        ({"starve": "coast"}, "starve='coast'"),
        ({"delay_steps": -1}, "negative"),
    ):
        with pytest.raises(ConfigError, match=match):
            AsyncChunks(Clock(), **kw)  # type: ignore[arg-type]
