"""`embodied bench all`: one JSON + markdown report; failing or missing areas are recorded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from embodied.bench import AREAS
from embodied.bench._report import TARGETS, figures, to_markdown


def test_bench_all_quick_writes_report(tmp_path: Path) -> None:
    """Real run of the eval area (+ a missing one) through the CLI, --quick."""
    proc = subprocess.run(
        [sys.executable, "-m", "embodied", "bench", "all", "--quick", "--json",
         "--areas", "eval,nosuch", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = json.loads(proc.stdout.strip().splitlines()[-1])
    report = json.loads((tmp_path / "bench.json").read_text())
    assert printed["areas"].keys() == report["areas"].keys() == {"eval", "nosuch"}
    ev = report["areas"]["eval"]
    assert ev["ok"], ev
    eff = ev["result"]["eval_parallel_efficiency"]
    assert 0.0 < eff < 2.0
    assert ev["result"]["episodes_per_s_1"] > 0 and ev["result"]["episodes_per_s_2"] > 0
    assert not report["areas"]["nosuch"]["ok"]
    assert (
        "'nosuch'" in report["areas"]["nosuch"]["error"]
        and "eval" in report["areas"]["nosuch"]["error"]
    )
    assert report["machine"]["cpu_count"] >= 1 and report["versions"]["torch"]
    row = next(r for r in report["figures"] if r["key"] == "eval_parallel_efficiency")
    assert row["target"] == ">= 0.8" and row["met"] == (eff >= 0.8)
    md = (tmp_path / "bench.md").read_text()
    assert "| eval | eval_parallel_efficiency |" in md and "| nosuch | error:" in md
    assert "Machine:" in md and "mujoco 3." in md


def test_bench_figures_targets_and_failures() -> None:
    """Targets match nested keys; a crashed area is listed with its error, not dropped."""
    assert "all" not in AREAS.names() and "_report" not in AREAS.names()
    report = {
        "quick": True,
        "machine": {"cpu": "x", "cpu_count": 2, "affinity": 2, "memory_gb": 1.0, "gpu": None,
                    "os": "linux", "python": "3.11", "load_avg_1m": 0.5},
        "versions": {"torch": "2"},
        "areas": {
            "sim": {"ok": True, "seconds": 1.0,
                    "result": {"mujoco:arm_reach": {"overhead": 1.7}, "libero:libero_10": {"overhead": 1.01}}},
            "policy": {"ok": True, "seconds": 1.0, "result": {"pdp": {"chunks_per_s": 150.0}}},
            "ros": {"ok": False, "seconds": 2.0, "error": "exit code 1: no rosmaster"},
        },
    }  # fmt: skip
    report["figures"] = figures(report)
    got = {(r["area"], r["key"]): (r["target"], r["met"]) for r in report["figures"]}
    assert got[("sim", "mujoco:arm_reach.overhead")] == ("<= 1.5", False)
    assert got[("sim", "libero:libero_10.overhead")] == ("<= 1.05", True)
    assert got[("policy", "pdp.chunks_per_s")] == (">= 100", True)
    md = to_markdown(report)
    assert "| ros | error: exit code 1: no rosmaster |" in md and "**no**" in md
    assert all(t.op in ("<=", "<", ">=", ">") for t in TARGETS)
