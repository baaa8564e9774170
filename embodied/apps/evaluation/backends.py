"""Execution backends: where grid episodes run.

A backend takes the grid and a picklable :class:`~embodied.apps.evaluation.worker.EpisodeRunner`
and returns one :class:`~embodied.apps.evaluation.worker.EpisodeRecord` per spec. Registered in
:data:`BACKENDS`: ``local`` (worker processes on this machine) and ``inline`` (this
process). A Ray backend registers the same way (``--backend ray``).

The ``local`` backend keeps one pipe per worker and knows which spec each worker holds, so
when a worker process dies (OOM kill, segfault in the simulator, ``kill -9``) its episode is
put back in the queue and rerun on a fresh worker; finished episodes are never lost.

An episode that raises is recorded, not fatal: workers call
:meth:`~embodied.apps.evaluation.worker.EpisodeRunner.attempt`, which turns the exception into
a record with ``error`` set (a failure counted in n, as OpenVLA's LIBERO evaluation counts it)
and reported with a ``failed`` event. Only errors that mean the evaluation is misconfigured
(:func:`~embodied.apps.evaluation.worker.aborts_evaluation`: ``ConfigError``,
``CompatibilityError``, ...) stop the run, re-raised here in the parent.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Protocol

from embodied.apps.evaluation.configuration_evaluation import EpisodeSpec
from embodied.apps.evaluation.worker import EpisodeRecord, EpisodeRunner
from embodied.errors import EmbodiedError
from embodied.registry import Registry
from embodied.threads import single_thread

EventCallback = Callable[[str, dict[str, Any]], None]
"""``on_event(kind, data)``: kinds ``start`` (spec, pid), ``done`` (record: the episode ran to
its end), ``worker_died`` (pid, spec or None, attempts), ``failed`` (spec, record, error: the
episode raised, or its worker died on every attempt; counted as a failure)."""


class EvaluationError(EmbodiedError, RuntimeError):
    """The evaluation stopped: an unexpected failure in a worker (its traceback is in the
    message), or more episodes failed than ``EvalConfig.max_episode_errors`` allows."""


class Backend(Protocol):
    """Runs grid episodes and returns their records keyed by spec index."""

    def run(
        self,
        specs: Sequence[EpisodeSpec],
        runner: EpisodeRunner,
        on_event: EventCallback | None = None,
    ) -> dict[int, EpisodeRecord]:
        """Run every spec (in any order) and return ``{spec.index: record}``."""
        ...


BACKENDS: Registry[Backend] = Registry(
    "evaluation backend", plugins=("embodied.apps.evaluation.ray_backend",)
)
"""Name -> factory(workers=..., max_retries=..., start_method=...) -> Backend."""


def emit(on_event: EventCallback | None, kind: str, **data: Any) -> None:
    """Call ``on_event(kind, data)`` when a callback is given."""
    if on_event is not None:
        on_event(kind, data)


def finished(on_event: EventCallback | None, record: EpisodeRecord) -> None:
    """Report a recorded episode: ``failed`` when it has an error, else ``done``."""
    if record.error is not None:
        emit(on_event, "failed", spec=record.spec, record=record, error=record.error)
    else:
        emit(on_event, "done", record=record)


def limit_errors(on_event: EventCallback | None, limit: int | None) -> EventCallback | None:
    """``on_event`` that also stops the evaluation after more than ``limit`` failed episodes.

    The :class:`EvaluationError` is raised from the callback, inside the backend's loop, so
    the backend shuts its workers down as for any error. ``limit=None`` returns ``on_event``.
    """
    if limit is None:
        return on_event
    failed: list[str] = []

    def guarded(kind: str, data: dict[str, Any]) -> None:
        emit(on_event, kind, **data)
        if kind == "failed":
            failed.append(str(data.get("error")))
            if len(failed) > limit:
                raise EvaluationError(
                    f"{len(failed)} episodes failed, more than max_episode_errors={limit}; "
                    f"the last one: {failed[-1]}",
                    fix="fix the cause, or raise max_episode_errors (None: never stop)",
                )

    return guarded


def next_spec(pending: deque[EpisodeSpec], last_env: str) -> EpisodeSpec:
    """Take the next spec off ``pending``, preferring one on ``last_env`` (already built)."""
    for i, spec in enumerate(pending):
        if spec.env_id == last_env:
            del pending[i]
            return spec
    return pending.popleft()


@dataclass
class InlineBackend:
    """Runs every episode in this process, in grid order (debugging, tiny evals)."""

    workers: int = 0
    max_retries: int = 0
    start_method: str = "spawn"

    def run(
        self,
        specs: Sequence[EpisodeSpec],
        runner: EpisodeRunner,
        on_event: EventCallback | None = None,
    ) -> dict[int, EpisodeRecord]:
        """Run ``specs`` sequentially."""
        out: dict[int, EpisodeRecord] = {}
        try:
            for spec in specs:
                emit(on_event, "start", spec=spec, pid=os.getpid())
                out[spec.index] = runner.attempt(spec)
                finished(on_event, out[spec.index])
        finally:
            runner.close()
        return out


def _worker_main(conn: Connection, runner: EpisodeRunner) -> None:
    """Worker loop: receive a spec, run it, send ``("ok", record)`` or ``("error", ...)``.

    ``ok`` includes an episode that raised (its record carries the error); ``error`` is an
    exception that stops the evaluation (:func:`~.worker.aborts_evaluation`), or a failure to
    send the record.
    """
    single_thread()
    try:
        while True:
            spec = conn.recv()
            if spec is None:
                break
            try:
                record = runner.attempt(spec)
            except Exception as exc:
                try:
                    conn.send(("error", spec.index, exc, traceback.format_exc()))
                except Exception:  # exception not picklable
                    conn.send(("error", spec.index, None, traceback.format_exc()))
                continue
            conn.send(("ok", spec.index, record, ""))
    except (EOFError, KeyboardInterrupt):
        pass
    finally:
        runner.close()


@dataclass
class _Worker:
    proc: Any
    conn: Connection
    current: EpisodeSpec | None = None
    last_env: str = ""


@dataclass
class LocalBackend:
    """A pool of worker processes on this machine with rerun-on-death.

    Args:
        workers: Worker processes (each runs one single-threaded simulator).
        max_retries: Reruns of an episode whose worker died, before it is recorded as failed.
        start_method: ``forkserver`` or ``spawn``.
    """

    workers: int = 1
    max_retries: int = 2
    start_method: str = "forkserver"
    _attempts: dict[int, int] = field(default_factory=dict, repr=False)

    def _spawn(self, ctx: Any, runner: EpisodeRunner) -> _Worker:
        parent, child = ctx.Pipe(duplex=True)
        proc = ctx.Process(target=_worker_main, args=(child, runner), daemon=True)
        proc.start()
        child.close()
        return _Worker(proc, parent)

    def run(
        self,
        specs: Sequence[EpisodeSpec],
        runner: EpisodeRunner,
        on_event: EventCallback | None = None,
    ) -> dict[int, EpisodeRecord]:
        """Run ``specs`` on ``workers`` processes; rerun episodes of workers that die."""
        ctx = mp.get_context(self.start_method)
        pending: deque[EpisodeSpec] = deque(specs)
        results: dict[int, EpisodeRecord] = {}
        attempts = self._attempts = {s.index: 0 for s in specs}
        pool = [self._spawn(ctx, runner) for _ in range(min(self.workers, len(specs)))]
        try:
            while pending or any(w.current is not None for w in pool):
                for w in pool:
                    if w.current is None and pending and w.proc.is_alive():
                        spec = next_spec(pending, w.last_env)
                        attempts[spec.index] += 1
                        w.current, w.last_env = spec, spec.env_id
                        # a worker that died while idle is handled below via its sentinel
                        with contextlib.suppress(OSError):
                            w.conn.send(spec)
                        emit(on_event, "start", spec=spec, pid=w.proc.pid)
                waitables: list[Any] = [w.conn for w in pool] + [w.proc.sentinel for w in pool]
                wait(waitables, timeout=1.0)
                for i, w in enumerate(list(pool)):
                    msg = None
                    try:
                        if w.conn.poll():
                            msg = w.conn.recv()
                    except (EOFError, OSError):
                        msg = None
                    if msg is not None:
                        self._handle(msg, w, results, on_event)
                    if not w.proc.is_alive():
                        pool[i] = self._replace(ctx, runner, w, pending, results, on_event)
        finally:
            self._shutdown(pool)
        return results

    def _handle(
        self,
        msg: tuple[str, int, Any, str],
        w: _Worker,
        results: dict[int, EpisodeRecord],
        on_event: EventCallback | None,
    ) -> None:
        kind, index, payload, tb = msg
        if kind == "ok":
            record: EpisodeRecord = payload
            record.attempts = self._attempts.get(index, 1)
            results[index] = record
            w.current = None
            finished(on_event, record)
            return
        if isinstance(payload, EmbodiedError):
            raise payload  # e.g. CompatibilityError: same for every episode, stop now
        raise EvaluationError(f"episode {index} failed in worker {w.proc.pid}:\n{tb}")

    def _replace(
        self,
        ctx: Any,
        runner: EpisodeRunner,
        w: _Worker,
        pending: deque[EpisodeSpec],
        results: dict[int, EpisodeRecord],
        on_event: EventCallback | None,
    ) -> _Worker:
        spec = w.current
        w.conn.close()
        w.proc.join(timeout=1.0)
        emit(
            on_event,
            "worker_died",
            pid=w.proc.pid,
            exitcode=w.proc.exitcode,
            spec=spec,
            attempts=None if spec is None else self._attempts[spec.index],
        )
        if spec is not None:
            if self._attempts[spec.index] > self.max_retries:
                results[spec.index] = EpisodeRecord(
                    spec=spec,
                    attempts=self._attempts[spec.index],
                    error=f"worker died {self._attempts[spec.index]} times "
                    f"(last exit code {w.proc.exitcode})",
                )
                finished(on_event, results[spec.index])
            else:
                pending.appendleft(spec)
        return self._spawn(ctx, runner)

    @staticmethod
    def _shutdown(pool: list[_Worker]) -> None:
        for w in pool:
            with contextlib.suppress(OSError):
                w.conn.send(None)
        for w in pool:
            w.proc.join(timeout=5.0)
            if w.proc.is_alive():
                w.proc.terminate()
                w.proc.join(timeout=2.0)
            w.conn.close()


BACKENDS.register("local", LocalBackend, help="worker processes on this machine")
BACKENDS.register("inline", InlineBackend, help="this process, sequentially (debugging)")
