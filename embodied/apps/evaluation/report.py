"""Evaluation results: the :class:`EvalResult` object and its JSON / markdown files."""

from __future__ import annotations

import json
import math
import platform
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from importlib import metadata
from pathlib import Path
from typing import Any

from embodied.apps.evaluation.stats import GroupStats, TaskStats
from embodied.apps.evaluation.worker import EpisodeRecord
from embodied.apps.plotting import plot_reliability
from embodied.io import write_json, write_text
from embodied.rewards.calibration import judge_report

VERSIONED_PACKAGES = (
    "embodied",
    "numpy",
    "torch",
    "mujoco",
    "gymnasium",
    "robosuite",
    "libero",
    "bddl",
    "imageio-ffmpeg",
    "transformers",
    "pillow",
    "simplejpeg",
)
"""Packages whose versions every result file records (None when not installed)."""


def library_versions(packages: Sequence[str] = VERSIONED_PACKAGES) -> dict[str, str | None]:
    """Installed versions of ``packages`` plus Python and the platform."""
    out: dict[str, str | None] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }
    for name in packages:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


@dataclass
class EvalResult:
    """Everything an evaluation produced.

    Attributes:
        config: :meth:`EvalConfig.describe` of the run.
        policy: Description of the policy factory.
        envs: Env id -> ``env.describe()`` (includes the LIBERO protocol for LIBERO envs).
        versions: Library versions (:func:`library_versions`).
        episodes: One record per grid episode, in grid order.
        tasks: Per (task, variant) statistics with Wilson 95% intervals.
        groups: Per (group, variant) averages (e.g. per LIBERO suite).
        wall_s: Wall time of the evaluation (s).
        files: Written files by kind (``json``, ``markdown``, ``videos``), relative to ``out``.
        preflight: What was checked before the first episode (``{"envs": env id -> {"env":
            description, "policy": the policy's preflight record}, "versions": ...}``), also
            written to ``preflight.json``; None without a preflight.
    """

    config: dict[str, Any]
    policy: dict[str, Any]
    envs: dict[str, dict[str, Any]]
    versions: dict[str, str | None]
    episodes: list[EpisodeRecord]
    tasks: list[TaskStats]
    groups: list[GroupStats]
    wall_s: float
    files: dict[str, Any] = field(default_factory=dict)
    preflight: dict[str, Any] | None = None

    def task(self, env_id: str, variant: str = "default") -> TaskStats:
        """Statistics of one task and variant."""
        for t in self.tasks:
            if t.env_id == env_id and t.variant == variant:
                return t
        raise KeyError(f"no results for {env_id!r} / {variant!r}")

    def to_dict(self) -> dict[str, Any]:
        """JSON form (written to ``results.json``; NaN written as null)."""
        d = {
            "format": "embodied-eval/1",
            "config": self.config,
            "policy": self.policy,
            "versions": self.versions,
            "envs": self.envs,
            "groups": [g.to_dict() for g in self.groups],
            "tasks": [t.to_dict() for t in self.tasks],
            "episodes": [e.to_dict() for e in self.episodes],
            "wall_s": self.wall_s,
            "files": self.files,
        }
        if self.preflight is not None:
            d["preflight"] = self.preflight
        if self.judge_agreement is not None:
            d["judge_agreement"] = self.judge_agreement
        return _finite(d)  # type: ignore[no-any-return]

    @cached_property
    def judge_agreement(self) -> dict[str, Any] | None:
        """Judge-vs-oracle (env success) agreement over judged episodes, or None (no judge).

        Computed once: the episodes are final when the result is built."""
        judged = [e for e in self.episodes if e.judge_success is not None and e.error is None]
        if not judged:
            return None
        probs = [float(e.judge_prob or 0.0) for e in judged]
        thr = float(judged[0].judge_threshold if judged[0].judge_threshold is not None else 0.5)
        return {
            "judge": self.config.get("judge"),
            "episodes": len(judged),
            **judge_report(probs, [e.success for e in judged], thr),
        }

    def markdown(self) -> str:
        """Markdown report: per-group averages, per-task table, protocol and versions."""
        return to_markdown(self)


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{100 * x:.1f}%"


def to_markdown(result: EvalResult) -> str:
    """Render ``result`` as markdown."""
    lines = [
        "# Evaluation results",
        "",
        f"Policy: `{json.dumps(result.policy)}`  ",
        f"Episodes: {len(result.episodes)} in {result.wall_s:.1f} s with "
        f"{result.config.get('workers')} worker(s), backend `{result.config.get('backend')}`",
        "",
        "## Groups",
        "",
        "| group | variant | tasks | episodes | mean task success | pooled success | 95% CI |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for g in result.groups:
        lines.append(
            f"| {g.group} | {g.variant} | {g.n_tasks} | {g.n} | {_pct(g.mean_task_success)} | "
            f"{_pct(g.success_rate)} | [{_pct(g.ci_low)}, {_pct(g.ci_high)}] |"
        )
    lines += [
        "",
        "## Tasks",
        "",
        "| task | instruction | variant | success | 95% CI (Wilson) | n | mean steps | errors |",
        "|---|---|---|---:|---|---:|---:|---:|",
    ]
    for t in result.tasks:
        lines.append(
            f"| {t.env_id} | {t.instruction} | {t.variant} | {t.successes}/{t.n} "
            f"({_pct(t.success_rate)}) | [{_pct(t.ci_low)}, {_pct(t.ci_high)}] | {t.n} | "
            f"{t.mean_steps:.1f} | {t.errors} |"
        )
    if any(t.errors for t in result.tasks):
        lines += ["", "Episodes that could not be run (errors) count in n as failures."]
    lines += outcome_lines(result.tasks)
    lines += error_lines(result.episodes)
    agr = result.judge_agreement
    if agr is not None:
        lines += [
            "",
            "## Judge vs oracle",
            "",
            f"Judge `{agr['judge']}` on {agr['episodes']} episodes (final clip) against the "
            f"simulator oracle: agreement {agr['accuracy']:.1f}%, TPR {agr['tpr']:.1f}%, "
            f"TNR {agr['tnr']:.1f}%, FPR {agr['fpr']:.1f}%, FNR {agr['fnr']:.1f}%, ROC-AUC "
            f"{agr['roc_auc']:.3f}, calibration error {agr['ece']:.3f} "
            "(reliability diagram: `judge_reliability.png`)",
        ]
    videos = result.files.get("videos") or []
    if videos:
        lines += ["", "## Videos", ""] + [f"- [{v}]({v})" for v in videos]
    protocols = {
        json.dumps(d["protocol"], sort_keys=True) for d in result.envs.values() if "protocol" in d
    }
    if protocols:
        lines += ["", "## Protocol", ""]
        for p in sorted(protocols):
            lines += ["```json", json.dumps(json.loads(p), indent=2), "```"]
    lines += preflight_lines(result.preflight)
    lines += ["", "## Versions", ""]
    lines += [f"- {k}: {v}" for k, v in result.versions.items()]
    return "\n".join(lines) + "\n"


def outcome_lines(tasks: Sequence[TaskStats]) -> list[str]:
    """Markdown ``## Outcomes`` section: one row per (task, variant, boolean outcome key),
    e.g. arm_reach's ``wrong_cube_reached``, with its count, rate and Wilson 95% interval
    over all n episodes (empty when no task has boolean outcomes)."""
    rows = [
        f"| {t.env_id} | {t.variant} | {key} | {int(r['count'])}/{t.n} ({_pct(r['rate'])}) | "
        f"[{_pct(r['ci_low'])}, {_pct(r['ci_high'])}] |"
        for t in tasks
        for key, r in t.outcome_rates.items()
    ]
    if not rows:
        return []
    return [
        "",
        "## Outcomes",
        "",
        "Episodes whose final step reported the outcome true, out of all n episodes.",
        "",
        "| task | variant | outcome | episodes | 95% CI (Wilson) |",
        "|---|---|---|---:|---|",
        *rows,
    ]


def preflight_lines(record: Mapping[str, Any] | None) -> list[str]:
    """Markdown ``## Preflight`` section: each env's policy record, one ``key: value`` line
    per setting (empty without a record or without policy records)."""
    if not record:
        return []
    lines: list[str] = []
    for env_id, entry in record.get("envs", {}).items():
        policy = entry.get("policy")
        if not policy:
            continue
        lines += ["", f"### {env_id}", ""]
        lines += [f"- {k}: `{json.dumps(v)}`" for k, v in policy.items() if k != "versions"]
    return ["", "## Preflight", *lines] if lines else []


MAX_LISTED_ERRORS = 20
"""Failed episodes listed in ``results.md`` (all of them are in ``results.json``)."""


def error_lines(episodes: Sequence[EpisodeRecord], limit: int = MAX_LISTED_ERRORS) -> list[str]:
    """Markdown ``## Errors`` section: one line per failed episode (first line of its error).

    Returns ``[]`` when no episode has an error.
    """
    failed = [e for e in episodes if e.error is not None]
    if not failed:
        return []
    lines = ["", "## Errors", ""]
    for e in failed[:limit]:
        s = e.spec
        where = f"seed {s.seed}" + ("" if s.init_state is None else f", init state {s.init_state}")
        text = str(e.error).strip().replace("`", "'")
        first = text.splitlines()[0] if text else "?"
        lines.append(f"- {s.env_id} / {s.variant} / episode {s.episode} ({where}): `{first}`")
    if len(failed) > limit:
        lines.append(f"- ... and {len(failed) - limit} more (see `results.json`)")
    return lines


PREFLIGHT_FILE = "preflight.json"
"""The preflight record's file name beside ``results.json``."""
JUDGE_PLOT = "judge_reliability.png"
"""Reliability diagram of the judge against the oracle (with ``--judge``)."""


def write_preflight(record: dict[str, Any], out: Path) -> Path:
    """Atomically write the preflight record to ``out/preflight.json``."""
    path = out / PREFLIGHT_FILE
    write_json(path, _finite(record))
    return path


def write_results(result: EvalResult, out: Path) -> dict[str, Any]:
    """Atomically write ``results.json`` and ``results.md`` into ``out``; return the file map."""
    files: dict[str, Any] = {
        "json": "results.json",
        "markdown": "results.md",
        "videos": sorted(e.video for e in result.episodes if e.video),
    }
    if result.preflight is not None:
        files["preflight"] = PREFLIGHT_FILE
    agreement = result.judge_agreement
    if agreement is not None:
        name = str(agreement["judge"])
        plot_reliability({name: agreement}, out / JUDGE_PLOT, f"{name} vs simulator oracle")
        files["judge_reliability"] = JUDGE_PLOT
    result.files = files
    write_json(out / "results.json", result.to_dict())
    write_text(out / "results.md", result.markdown())
    return files


def _finite(obj: Any) -> Any:
    """Replace NaN/inf by None so the JSON is strict."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj
