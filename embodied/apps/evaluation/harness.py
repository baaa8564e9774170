"""``evaluate(config, policy_factory) -> EvalResult``: the evaluation harness."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from embodied.apps.evaluation.backends import (
    BACKENDS,
    EventCallback,
    InlineBackend,
    limit_errors,
)
from embodied.apps.evaluation.configuration_evaluation import (
    EpisodeSpec,
    EvalConfig,
    PolicyFactory,
    PolicyLoader,
)
from embodied.apps.evaluation.grid import build_grid
from embodied.apps.evaluation.journal import EpisodeJournal, fingerprint
from embodied.apps.evaluation.report import (
    EvalResult,
    library_versions,
    write_preflight,
    write_results,
)
from embodied.apps.evaluation.stats import GroupStats, TaskStats, group_stats, task_stats
from embodied.apps.evaluation.worker import EpisodeRecord, EpisodeRunner
from embodied.io import remove_stale_temps


def preflight(runner: EpisodeRunner, specs: Sequence[EpisodeSpec]) -> dict[str, dict[str, Any]]:
    """Build one env per group with ``runner`` and check every variant's policy against it.

    Returns:
        Env id -> ``{"env": env.describe(), "policy": the policy's preflight record}`` (see
        :meth:`EpisodeRunner.check`).

    Raises:
        CompatibilityError: before any worker starts or any step is taken.
    """
    firsts: dict[str, str] = {}
    for s in specs:
        firsts.setdefault(s.group, s.env_id)
    return {env_id: runner.check(env_id) for env_id in firsts.values()}


def summarize(
    records: Sequence[EpisodeRecord],
) -> tuple[list[TaskStats], list[GroupStats]]:
    """Per (task, variant) and per (group, variant) statistics of ``records``.

    An episode that raised or could not be run (``error`` set) counts in ``n`` as a
    failure, as OpenVLA's LIBERO evaluation counts an episode that raised, and in
    ``errors``; its steps are left out of ``mean_steps``. Boolean entries of the records'
    ``outcome`` (e.g. arm_reach's ``wrong_cube_reached``) are counted over the same n
    (:attr:`TaskStats.outcome_rates`; an episode that could not be run counts as False).
    """
    by_task: dict[tuple[str, str], list[EpisodeRecord]] = defaultdict(list)
    for r in records:
        by_task[(r.spec.env_id, r.spec.variant)].append(r)
    tasks: list[TaskStats] = []
    for (env_id, variant), recs in by_task.items():
        ok = [r for r in recs if r.error is None]
        tasks.append(
            task_stats(
                env_id,
                recs[0].spec.group,
                variant,
                next((r.instruction for r in ok if r.instruction), ""),
                [r.success and r.error is None for r in recs],
                [r.steps for r in ok],
                errors=len(recs) - len(ok),
                outcomes=[r.outcome for r in recs],
            )
        )
    by_group: dict[tuple[str, str], list[TaskStats]] = defaultdict(list)
    for t in tasks:
        by_group[(t.group, t.variant)].append(t)
    groups = [group_stats(g, v, ts) for (g, v), ts in by_group.items()]
    return tasks, groups


def evaluate(
    config: EvalConfig,
    policy_factory: PolicyFactory | str,
    on_event: EventCallback | None = None,
) -> EvalResult:
    """Run the episode grid of ``config`` and summarise it.

    Args:
        config: What to run and how.
        policy_factory: ``factory(env) -> Policy``, picklable (module-level function or
            :class:`PolicyLoader`); a string is ``PolicyLoader(string)`` (a registered
            name or a checkpoint folder).
        on_event: Progress callback ``(kind, data)`` (see
            :data:`~embodied.apps.evaluation.backends.EventCallback`), called in this process.

    Returns:
        The :class:`EvalResult`; when ``config.out`` is set, ``results.json``,
        ``results.md`` and ``videos/*.mp4`` are written there (atomically), and each
        finished episode is journaled as it ends (:mod:`~embodied.apps.evaluation.journal`):
        rerunning the same evaluation into the same folder after a kill runs only the
        episodes the journal lacks.

    Raises:
        UnknownNameError: unknown env, suite, task or backend (listing what exists).
        CompatibilityError: the policy does not fit an env (before the first step).
        EmbodiedError: another error that means the evaluation is misconfigured
            (:func:`~embodied.apps.evaluation.worker.aborts_evaluation`), raised in an
            episode. Any other exception in an episode only fails that episode: it is
            recorded (``EpisodeRecord.error``) and counted in n as a failure and in
            ``errors``.
        EvaluationError: more than ``config.max_episode_errors`` episodes failed, or a
            worker failed outside its episode.
    """
    factory: PolicyFactory = (
        PolicyLoader(policy_factory) if isinstance(policy_factory, str) else policy_factory
    )
    t0 = time.perf_counter()
    specs = build_grid(config)
    describe = getattr(factory, "describe", None)
    policy_record = describe() if callable(describe) else {"factory": repr(factory)}
    journal: EpisodeJournal | None = None
    done: dict[int, EpisodeRecord] = {}
    if config.out is not None:
        out = Path(config.out)
        for folder in (out, out / "videos"):
            remove_stale_temps(folder)
        journal = EpisodeJournal(out, fingerprint(config.describe(), policy_record))
        done = journal.records(specs)
    todo = [s for s in specs if s.index not in done]
    backend = BACKENDS.make(
        config.backend if config.workers > 0 else "inline",
        workers=config.workers,
        max_retries=config.max_retries,
        start_method=config.start_method,
    )
    envs: dict[str, dict[str, Any]] = {}
    preflight_record: dict[str, Any] | None = None
    runner = EpisodeRunner.from_config(config, factory)
    try:
        if config.preflight:
            checked = preflight(runner, specs)
            envs.update({env_id: entry["env"] for env_id, entry in checked.items()})
            preflight_record = {"envs": checked, "versions": library_versions()}
            if config.out is not None:  # written before the first episode, kept on a crash
                write_preflight(preflight_record, Path(config.out))
            if on_event is not None:
                on_event("preflight", {"preflight": preflight_record})
    finally:
        if not isinstance(backend, InlineBackend):
            runner.close()  # workers get the runner without envs (and build their own)
    guarded = limit_errors(_journaled(on_event, journal), config.max_episode_errors)
    try:
        results = backend.run(todo, runner, on_event=guarded) if todo else {}
    finally:
        runner.close_recording()  # config.record: workers=0, this process wrote it
        if journal is not None:
            journal.close()
    results.update(done)
    records = [results[s.index] for s in specs]
    for r in records:
        if r.env_description is not None:
            envs.setdefault(r.spec.env_id, r.env_description)
    tasks, groups = summarize(records)
    result = EvalResult(
        config=config.describe(),
        policy=policy_record,
        envs=dict(sorted(envs.items())),
        versions=library_versions(),
        episodes=records,
        tasks=tasks,
        groups=groups,
        wall_s=time.perf_counter() - t0,
        preflight=preflight_record,
    )
    if config.out is not None:
        write_results(result, Path(config.out))
    return result


def _journaled(
    on_event: EventCallback | None, journal: EpisodeJournal | None
) -> EventCallback | None:
    """``on_event`` that first journals each finished episode (done or failed)."""
    if journal is None:
        return on_event

    def wrapped(kind: str, data: dict[str, Any]) -> None:
        if kind in ("done", "failed"):
            journal.append(data["record"])
        if on_event is not None:
            on_event(kind, data)

    return wrapped
