"""The tuning session's state machine: its transition table, and what each command does to it."""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import pytest

from embodied.apps.tune import TuneConfig, TuneSession
from embodied.apps.tune.session import TRANSITIONS, SessionState, TransitionError
from embodied.apps.tune.task import build_task
from embodied.errors import ConfigError

S = SessionState
LIVE = (S.RUNNING, S.PAUSED, S.STEPPING)
EXPERIMENTS = (S.EXPERIMENT, S.EXPERIMENT_PAUSED, S.EXPERIMENT_STEPPING)


def _session(tmp_path: Path, **kw: object) -> TuneSession:
    cfg = TuneConfig(out_dir=tmp_path, **kw)  # type: ignore[arg-type]
    return TuneSession(build_task(cfg, camera=False), cfg)


def _path(start: SessionState, goal: SessionState) -> list[SessionState]:
    """The states to pass through (goal included) from ``start`` to ``goal`` along the table."""
    came: dict[SessionState, SessionState | None] = {start: None}
    todo = deque([start])
    while todo:
        state = todo.popleft()
        for nxt in sorted(TRANSITIONS[state], key=lambda s: s.value):
            if nxt not in came:
                came[nxt] = state
                todo.append(nxt)
    assert goal in came, f"{goal.name} unreachable from {start.name}"
    hops: list[SessionState] = []
    at: SessionState | None = goal
    while at is not None and at is not start:
        hops.append(at)
        at = came[at]
    return hops[::-1]


def _drive(session: TuneSession, goal: SessionState) -> None:
    # the table's own method, called directly: only the session's loop changes states in use
    for hop in _path(session.state, goal):
        session._transition(hop)
    assert session.state is goal


def _wait(cond: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail("condition not reached in time")
        time.sleep(0.02)


def test_table_is_total_and_flags_follow_the_state() -> None:
    assert set(TRANSITIONS) == set(SessionState)
    assert all(targets <= set(SessionState) for targets in TRANSITIONS.values())
    assert [s for s in SessionState if s.paused] == [
        S.PAUSED,
        S.STEPPING,
        S.EXPERIMENT_PAUSED,
        S.EXPERIMENT_STEPPING,
    ]
    assert [s for s in SessionState if s.stepping] == [S.STEPPING, S.EXPERIMENT_STEPPING]
    assert [s for s in SessionState if s.busy] == list(EXPERIMENTS)
    for state in SessionState:  # pause, resume and step stay in the phase and are allowed
        assert {state.held(), state.resumed(), state.step_granted()} <= TRANSITIONS[state]
        assert state.held().busy == state.resumed().busy == state.step_granted().busy == state.busy
    # the phase changes only between matching run modes
    crossings = {(a, b) for a in SessionState for b in TRANSITIONS[a] if a.busy != b.busy}
    assert crossings == {
        (S.RUNNING, S.EXPERIMENT),
        (S.PAUSED, S.EXPERIMENT_PAUSED),
        (S.STEPPING, S.EXPERIMENT_STEPPING),
        (S.EXPERIMENT, S.RUNNING),
        (S.EXPERIMENT_PAUSED, S.PAUSED),
        (S.EXPERIMENT_STEPPING, S.STEPPING),
    }


def test_every_allowed_transition_works_and_every_other_raises(tmp_path: Path) -> None:
    session = _session(tmp_path)
    try:
        assert session.state is S.RUNNING
        for src, dst in itertools.product(SessionState, SessionState):
            _drive(session, src)
            version = session.state_version
            if dst in TRANSITIONS[src]:
                session._transition(dst)
                assert session.state is dst
                changed = (src.paused, src.busy) != (dst.paused, dst.busy)
                assert session.state_version == version + changed  # the page hears of it
                snap = session.snapshot()
                assert (snap["paused"], snap["busy"]) == (dst.paused, dst.busy)
            else:
                with pytest.raises(TransitionError, match=f"{src.name} -> {dst.name}"):
                    session._transition(dst)
                assert session.state is src and session.state_version == version
    finally:
        session.close()


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        (S.PAUSED, S.EXPERIMENT),  # an experiment starts in the run mode live was left in
        (S.RUNNING, S.EXPERIMENT_PAUSED),
        (S.EXPERIMENT, S.PAUSED),  # an experiment ends in its run mode; failures pause after
        (S.EXPERIMENT_STEPPING, S.RUNNING),
        (S.STEPPING, S.EXPERIMENT),
    ],
)
def test_forbidden_transitions_raise(tmp_path: Path, src: SessionState, dst: SessionState) -> None:
    session = _session(tmp_path)
    try:
        _drive(session, src)
        with pytest.raises(TransitionError):
            session._transition(dst)
        assert session.state is src
    finally:
        session.close()


def test_experiment_start_and_end_need_the_right_phase(tmp_path: Path) -> None:
    session = _session(tmp_path)
    try:
        _drive(session, S.EXPERIMENT_PAUSED)
        with pytest.raises(TransitionError, match="experiment started in EXPERIMENT_PAUSED"):
            session._begin_experiment()
        session._end_experiment()
        assert session.state is S.PAUSED
        with pytest.raises(TransitionError, match="experiment ended in PAUSED"):
            session._end_experiment()
        session._begin_experiment()
        assert session.state is S.EXPERIMENT_PAUSED
    finally:
        session.close()


def test_commands_drive_the_states_and_requests(tmp_path: Path) -> None:
    session = _session(tmp_path)  # not started: submit() applies each command at once
    try:
        assert (session.state, session.stop_requested, session.cancel_requested) == (
            S.RUNNING,
            False,
            False,
        )
        for cmd, state in [
            ("pause", S.PAUSED),
            ("pause", S.PAUSED),
            ("step", S.STEPPING),
            ("step", S.STEPPING),
            ("pause", S.PAUSED),
            ("resume", S.RUNNING),
            ("resume", S.RUNNING),
            ("step", S.STEPPING),
            ("resume", S.RUNNING),
        ]:
            session.submit({"cmd": cmd})
            assert session.state is state, cmd
            assert session.snapshot()["paused"] is state.paused
        assert not session.stop_requested
        session.submit({"cmd": "reset"})
        assert session.stop_requested and session.state is S.RUNNING
        session.run_episode(pace=False)  # a new episode takes the request
        assert not session.stop_requested
        session.submit({"cmd": "new_seed", "seed": 3})
        assert session.stop_requested and session.seed == 3
        session.submit({"cmd": "stop_job"})  # no experiment: it ends the episode like reset
        assert session.cancel_requested and session.stop_requested
        session.submit({"cmd": "pause"})
        session.submit({"cmd": "step_test", "from": 0.08, "to": 0.15})
        # queued for the loop: the live episode is asked to end, the experiment will run
        assert session.state is S.RUNNING and session.stop_requested
        assert not session.cancel_requested  # an earlier Stop does not cancel the new job
        assert not session.busy
    finally:
        session.close()


def test_step_lets_one_control_step_through_then_pauses(tmp_path: Path) -> None:
    session = _session(tmp_path)
    session.start()
    try:
        _wait(lambda: len(session.telemetry_since(-1)) >= 3)
        session.submit({"cmd": "pause"})
        _wait(lambda: session.state is S.PAUSED)
        time.sleep(0.2)
        n = len(session.telemetry_since(-1))
        session.submit({"cmd": "step"})
        _wait(lambda: len(session.telemetry_since(-1)) == n + 1)
        _wait(lambda: session.state is S.PAUSED)
        time.sleep(0.2)
        assert len(session.telemetry_since(-1)) == n + 1
        session.submit({"cmd": "resume"})
        _wait(lambda: session.state is S.RUNNING and len(session.telemetry_since(-1)) > n + 3)
    finally:
        session.close()


def test_experiment_states_pause_step_and_stop(tmp_path: Path) -> None:
    session = _session(tmp_path)
    session.start()
    try:
        session.submit({"cmd": "autotune", "budget": 50, "from": 0.08, "to": 0.15})
        _wait(lambda: session.state is S.EXPERIMENT)
        with pytest.raises(ConfigError, match="refused: an experiment"):
            session.submit({"cmd": "reset"})
        session.submit({"cmd": "pause"})
        _wait(lambda: session.state is S.EXPERIMENT_PAUSED)
        assert session.snapshot()["paused"] and session.snapshot()["busy"]
        n = len(session.telemetry_since(-1))
        session.submit({"cmd": "step"})
        _wait(lambda: len(session.telemetry_since(-1)) == n + 1)
        _wait(lambda: session.state is S.EXPERIMENT_PAUSED)
        session.submit({"cmd": "stop_job"})  # Stop while paused: the experiment ends, paused

        def ends() -> list[str]:
            _, events = session.events_since(0)
            return [e["type"] for e in events if e["type"] in ("stopped", "error")]

        _wait(lambda: bool(ends()) and not session.cancel_requested)
        assert ends() == ["stopped"] and session.state is S.PAUSED
        session.submit({"cmd": "resume"})
        _wait(lambda: session.state is S.RUNNING)
    finally:
        session.close()


def test_a_failed_experiment_pauses_the_live_episodes(tmp_path: Path) -> None:
    session = _session(tmp_path, step_hold_s=1000.0, step_timeout_s=1000.0)  # no step: fails
    session.start()
    try:
        session.submit({"cmd": "step_test", "from": 0.08, "to": 0.15})

        def errors() -> list[str]:
            return [e["message"] for e in session.events_since(0)[1] if e["type"] == "error"]

        _wait(lambda: bool(errors()) and session.state is S.PAUSED)
        assert session.snapshot()["paused"] and not session.busy
        assert len(errors()) == 1 and "before the step" in errors()[0]
    finally:
        session.close()
