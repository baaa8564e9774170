"""``embodied bench serve``: ours, upstream openpi's server and the in-process floor, one run."""

from __future__ import annotations

import math
from types import ModuleType

from embodied.apps.bench import run_area


def test_bench_serve_reports_both_servers_and_the_floor(openpi_server: ModuleType) -> None:
    res = run_area("serve", quick=True)
    assert "error" not in res, res.get("error")
    assert res["request_bytes"] > 2 * 224 * 224 * 3  # two 224 px frames travel
    for pct in ("rtt_ms_p50", "rtt_ms_p99"):
        assert set(res[pct]) == {"in_process", "ours", "openpi", "remote_policy"}
        assert all(math.isfinite(v) and v > 0 for v in res[pct].values())
    # the floor has no transport: its median is below both servers' (about 12x on an idle
    # machine); the quick run's p99 is one scheduler hiccup on a shared machine, not compared
    p50 = res["rtt_ms_p50"]
    assert p50["in_process"] < min(p50["ours"], p50["openpi"])
    assert math.isclose(
        res["rtt_p50_ratio"], res["rtt_ms_p50"]["ours"] / res["rtt_ms_p50"]["openpi"]
    )
