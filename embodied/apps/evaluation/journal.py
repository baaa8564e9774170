"""The episode journal: an evaluation killed at any point resumes without rerunning an episode.

``evaluate(config)`` with an ``out`` folder appends each finished episode's record to
``out/episodes.jsonl`` (one JSON line, flushed and fsynced before the next episode is
counted) and writes ``results.json`` at the end. Rerunning the same evaluation into the same
folder reads the journal, keeps every episode it holds and runs only the others: a SIGKILL
loses at most the episodes that were running. The journal's first line is the evaluation's
fingerprint (grid, policy, protocol); a different evaluation into the same folder is refused
rather than mixed in. A line torn by the kill (no newline, or not JSON) is dropped; damage
elsewhere is an error naming the file.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from embodied.apps.evaluation.configuration_evaluation import EpisodeSpec
from embodied.apps.evaluation.worker import EpisodeRecord
from embodied.errors import ConfigError, DatasetError
from embodied.io import atomic_path

JOURNAL_FILE = "episodes.jsonl"
JOURNAL_VERSION = 1

RUN_ONLY_KEYS = (
    "workers",
    "out",
    "backend",
    "max_retries",
    "start_method",
    "max_episode_errors",
)
"""EvalConfig.describe() entries that change how episodes run, not what they measure: a
resumed evaluation may change them (more workers, another backend)."""


def fingerprint(config: Mapping[str, Any], policy: Mapping[str, Any]) -> dict[str, Any]:
    """What must match for two evaluations to share episodes: the config minus run-only keys,
    and the policy's description."""
    kept = {k: v for k, v in config.items() if k not in RUN_ONLY_KEYS}
    # JSON round trip: the stored header compares equal to a freshly built one
    return json.loads(json.dumps({"config": kept, "policy": dict(policy)}, default=str))


class EpisodeJournal:
    """Append-only record of the finished episodes of one evaluation (``out/episodes.jsonl``).

    Args:
        out: The evaluation's output folder.
        key: :func:`fingerprint` of the evaluation.

    Raises:
        ConfigError: the folder's journal belongs to another evaluation.
        DatasetError: the journal is damaged before its last line.
    """

    def __init__(self, out: Path, key: dict[str, Any]) -> None:
        self.path = out / JOURNAL_FILE
        self.key = key
        self._lines: list[dict[str, Any]] = []
        self._file: IO[str] | None = None
        if self.path.exists():
            self._lines = self._read()
        else:
            out.mkdir(parents=True, exist_ok=True)
            with atomic_path(self.path) as tmp:
                tmp.write_text(_line({"journal": JOURNAL_VERSION, "key": key}))

    def _read(self) -> list[dict[str, Any]]:
        raw = self.path.read_bytes()
        complete, _, torn = raw.rpartition(b"\n")
        lines = complete.split(b"\n") if complete else []
        if not lines:
            raise DatasetError(
                f"evaluation journal {str(self.path)!r} has no header line",
                fix=f"delete {self.path} to start the evaluation over, or pass another --out",
            )
        parsed: list[dict[str, Any]] = []
        for number, text in enumerate(lines, 1):
            try:
                value = json.loads(text)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise DatasetError(
                    f"evaluation journal {str(self.path)!r} line {number} is damaged ({exc})",
                    fix=f"delete {self.path} to start the evaluation over, or pass another --out",
                ) from exc
            if not isinstance(value, dict):
                raise DatasetError(
                    f"evaluation journal {str(self.path)!r} line {number} is not an object",
                    fix=f"delete {self.path} to start the evaluation over, or pass another --out",
                )
            parsed.append(value)
        header = parsed[0]
        if header.get("journal") != JOURNAL_VERSION or "key" not in header:
            raise DatasetError(
                f"evaluation journal {str(self.path)!r} has no version-{JOURNAL_VERSION} header",
                fix=f"delete {self.path} to start the evaluation over, or pass another --out",
            )
        if header["key"] != self.key:
            diff = sorted(_differences(header["key"], self.key))
            raise ConfigError(
                f"{str(self.path.parent)!r} holds episodes of another evaluation (differs in "
                f"{', '.join(diff[:6])}); resuming would mix them",
                fix="pass another --out, or rerun with the arguments of the first run",
            )
        if torn:  # the kill cut the last append short: drop it before appending more
            with atomic_path(self.path) as tmp:
                tmp.write_bytes(complete + b"\n")
        return parsed[1:]

    def records(self, specs: Sequence[EpisodeSpec]) -> dict[int, EpisodeRecord]:
        """The journal's records of ``specs``, keyed by spec index (the last record wins)."""
        by_spec = {json.dumps(s.to_dict(), sort_keys=True): s for s in specs}
        out: dict[int, EpisodeRecord] = {}
        for entry in self._lines:
            spec = by_spec.get(json.dumps(entry.get("spec"), sort_keys=True))
            if spec is None:
                continue
            out[spec.index] = _record(spec, entry, self.path)
        return out

    def append(self, record: EpisodeRecord) -> None:
        """Durably add one finished episode (flushed and fsynced before returning)."""
        if self._file is None:
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (kept open)
        self._file.write(_line(record.to_dict()))
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        """Close the file (appends reopen it)."""
        if self._file is not None:
            self._file.close()
            self._file = None


def _line(value: Any) -> str:
    # NaN (a policy time never measured) is kept as JSON's NaN extension: the journal is ours
    return json.dumps(value, default=str, allow_nan=True) + "\n"


def _record(spec: EpisodeSpec, entry: dict[str, Any], path: Path) -> EpisodeRecord:
    fields = {k: v for k, v in entry.items() if k != "spec"}
    try:
        record = EpisodeRecord(spec=spec, **fields)
    except TypeError as exc:
        raise DatasetError(
            f"evaluation journal {str(path)!r} holds a record this version cannot read ({exc})",
            fix=f"delete {path} to start the evaluation over, or pass another --out",
        ) from exc
    for name in ("env_ms_per_step", "policy_ms_per_step"):
        value = getattr(record, name)
        if value is None:
            setattr(record, name, math.nan)
    return record


def _differences(a: Any, b: Any, prefix: str = "") -> list[str]:
    """Dotted keys where two JSON values differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for k in sorted(set(a) | set(b)):
            out += _differences(a.get(k), b.get(k), f"{prefix}{k}.")
        return out
    return [] if a == b else [prefix.rstrip(".") or "(all)"]
