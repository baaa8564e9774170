"""``embodied bench all``: every benchmark area in one JSON + one markdown table.

Each area runs in its own process (``python -m embodied bench <area> --json``, one torch/BLAS
thread, a timeout), so an area that crashes, hangs or is missing its optional extra is
recorded with its error and the rest of the report still appears. The report holds the
machine description, library versions, each area's JSON object and a flat table of every
numeric figure with its target (from the issues that asked for it) and whether it is met.

Not an area itself (the leading underscore keeps it out of :data:`embodied.bench.AREAS`).
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from embodied.io import write_json, write_text

EXPECTED_AREAS = ("sim", "policy", "steer", "judge", "ros", "eval")
"""Areas the report always lists (missing ones are recorded as errors)."""

EXTRA_PACKAGES = (
    "transformers",
    "diffusers",
    "safetensors",
    "roslibpy",
    "ray",
    "accelerate",
    "stable-baselines3",
)


@dataclass(frozen=True)
class Target:
    """A target for the figures matching ``pattern`` (fnmatch on ``area/key.subkey``).

    Attributes:
        pattern: E.g. ``sim/mujoco:*.overhead``.
        op: ``<=``, ``<``, ``>=`` or ``>``.
        value: The threshold.
        source: Where the target comes from.
    """

    pattern: str
    op: str
    value: float
    source: str

    def met(self, x: float) -> bool:
        """Whether ``x`` meets the target."""
        ops: dict[str, Callable[[float, float], bool]] = {
            "<=": lambda a, b: a <= b,
            "<": lambda a, b: a < b,
            ">=": lambda a, b: a >= b,
            ">": lambda a, b: a > b,
        }
        return ops[self.op](x, self.value)

    def __str__(self) -> str:
        return f"{self.op} {self.value:g}"


TARGETS: tuple[Target, ...] = (
    Target("sim/mujoco:*.overhead", "<=", 1.5, "issue 2"),
    Target("sim/libero:*.overhead", "<=", 1.05, "issue 4"),
    Target("policy/pdp.chunks_per_s", ">=", 100.0, "issue 3"),
    Target("steer/overhead", "<=", 1.03, "issue 5"),
    Target("steer/pid_update_us", "<", 50.0, "issue 5"),
    Target("judge/minijudge.speedup", ">=", 4.0, "issue 6"),
    Target("eval/eval_parallel_efficiency", ">=", 0.8, "issue 9 (needs >= 2 idle cores)"),
)


def machine() -> dict[str, Any]:
    """CPU model, cores, memory, GPU, OS and load of this machine."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = math.nan
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_gb = int(line.split()[1]) / 2**20
                break
    except OSError:
        pass
    gpu = None
    try:
        import torch

        if torch.cuda.is_available():
            gpu = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except ImportError:  # pragma: no cover
        pass
    return {
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_gb": round(mem_gb, 1),
        "gpu": gpu,
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "load_avg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }


def versions() -> dict[str, str | None]:
    """Versions of the libraries the figures depend on."""
    from embodied.evaluation.report import library_versions

    out = library_versions()
    for name in EXTRA_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def run_area_subprocess(area: str, quick: bool, timeout_s: float) -> dict[str, Any]:
    """Run one area in a fresh process; ``{"ok", "seconds", "result" | "error"}``."""
    cmd = [sys.executable, "-m", "embodied", "bench", area, "--json"] + (
        ["--quick"] if quick else []
    )
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return {"ok": False, "seconds": timeout_s, "error": f"timed out after {timeout_s:.0f} s"}
    seconds = time.perf_counter() - t0
    if proc.returncode == 0:
        for line in reversed(proc.stdout.strip().splitlines()):
            try:
                result = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(result, dict):
                return {"ok": True, "seconds": seconds, "result": result}
    tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-6:]
    return {
        "ok": False,
        "seconds": seconds,
        "error": f"exit code {proc.returncode}: " + " | ".join(tail)[-800:],
    }


def run_all(
    areas: Sequence[str] | None = None,
    quick: bool = False,
    timeout_s: float = 900.0,
    on_area: Callable[[str, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run benchmark ``areas`` (default: every registered area plus the expected ones).

    Returns:
        The report: ``machine``, ``versions``, ``areas`` (name -> outcome), ``figures`` (flat
        rows with targets), ``quick`` and ``seconds``.
    """
    from embodied.bench import AREAS

    known = AREAS.names()
    names = list(areas) if areas else list(dict.fromkeys([*EXPECTED_AREAS, *known]))
    t0 = time.perf_counter()
    outcomes: dict[str, dict[str, Any]] = {}
    for name in names:
        if name not in known:
            outcomes[name] = {
                "ok": False,
                "seconds": 0.0,
                "error": f"no benchmark area {name!r}; known: {', '.join(known)}",
            }
        else:
            outcomes[name] = run_area_subprocess(name, quick, timeout_s)
        if on_area is not None:
            on_area(name, outcomes[name])
    report = {
        "format": "embodied-bench/1",
        "quick": quick,
        "machine": machine(),
        "versions": versions(),
        "areas": outcomes,
        "seconds": time.perf_counter() - t0,
    }
    report["figures"] = figures(report)
    return report


def _flatten(obj: Any, prefix: str = "") -> Iterator[tuple[str, float]]:
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            yield from _flatten(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(obj, bool):
        return
    elif isinstance(obj, int | float):
        yield prefix, float(obj)


def figures(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every numeric figure as ``{area, key, value, target, met, source}``."""
    rows = []
    for area, outcome in report["areas"].items():
        for key, value in _flatten(outcome.get("result", {})):
            target = next((t for t in TARGETS if fnmatch.fnmatch(f"{area}/{key}", t.pattern)), None)
            ok = None if target is None or not math.isfinite(value) else target.met(value)
            rows.append(
                {
                    "area": area,
                    "key": key,
                    "value": value if math.isfinite(value) else None,
                    "target": None if target is None else str(target),
                    "met": ok,
                    "source": None if target is None else target.source,
                }
            )
    return rows


def _num(x: float | None) -> str:
    if x is None:
        return "n/a"
    if x != 0 and (abs(x) >= 1e5 or abs(x) < 1e-3):
        return f"{x:.3g}"
    return f"{x:.4g}"


def to_markdown(report: Mapping[str, Any]) -> str:
    """The report as markdown: machine, versions, area status, figures with targets."""
    m = report["machine"]
    lines = [
        "# Benchmark report" + (" (quick)" if report.get("quick") else ""),
        "",
        f"Machine: {m['cpu']}, {m['cpu_count']} CPUs ({m['affinity']} usable), "
        f"{m['memory_gb']} GB RAM, GPU: {', '.join(m['gpu']) if m['gpu'] else 'none'}; "
        f"{m['os']}; Python {m['python']}; load (1 min) {m['load_avg_1m']:.1f} at the end.",
        "",
        "Versions: "
        + ", ".join(
            f"{k} {v}"
            for k, v in report["versions"].items()
            if k not in ("python", "platform") and v
        ),
        "",
        "## Areas",
        "",
        "| area | status | seconds |",
        "|---|---|---:|",
    ]
    for area, o in report["areas"].items():
        status = "ok" if o["ok"] else f"error: {o['error']}".replace("|", "/")
        lines.append(f"| {area} | {status} | {o['seconds']:.1f} |")
    targeted = [r for r in report["figures"] if r["target"] is not None]
    n_met = sum(bool(r["met"]) for r in targeted)
    lines += [
        "",
        f"## Targets ({n_met} of {len(targeted)} met)",
        "",
        "| area | figure | value | target | met | source |",
        "|---|---|---:|---|---|---|",
    ]
    for r in targeted:
        ok = "yes" if r["met"] else "**no**"
        lines.append(
            f"| {r['area']} | {r['key']} | {_num(r['value'])} | {r['target']} | {ok} | "
            f"{r['source']} |"
        )
    lines += [
        "",
        "## Figures",
        "",
        "| area | figure | value | target | met |",
        "|---|---|---:|---|---|",
    ]
    for r in report["figures"]:
        met = "" if r["met"] is None else ("yes" if r["met"] else "**no**")
        lines.append(
            f"| {r['area']} | {r['key']} | {_num(r['value'])} | {r['target'] or ''} | {met} |"
        )
    return "\n".join(lines) + "\n"


def write_report(report: Mapping[str, Any], out: str | os.PathLike[str]) -> dict[str, str]:
    """Atomically write ``bench.json`` and ``bench.md`` into ``out``; return their paths."""
    folder = Path(out)
    write_json(folder / "bench.json", report)
    write_text(folder / "bench.md", to_markdown(report))
    return {"json": str(folder / "bench.json"), "markdown": str(folder / "bench.md")}
