"""The latency experiment at a tiny budget: every cell runs, figures are consistent."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from embodied.apps.experiments.latency import LatencyConfig, markdown, run_experiment
from embodied.errors import ConfigError


def test_latency_experiment_runs_every_cell(tmp_path: Path) -> None:
    cfg = LatencyConfig(
        delays=(0, 4),
        episodes=2,
        training_seeds=(0,),
        demonstrations=4,
        train_steps=20,
        horizon=8,
        n_action_steps=4,
    )
    res = run_experiment(cfg, tmp_path)
    assert set(res["cells"]) == {f"{m}@{d}" for m in ("sync", "async", "rtc") for d in (0, 4)}
    for cell in res["cells"].values():
        assert cell["n"] == 2 and 0 <= cell["wilson95"][0] <= cell["success"] <= cell["wilson95"][1]
    # synchronous execution without delay never misses a period; with 4 steps it waits 4 per chunk
    assert res["cells"]["sync@0"]["missed_periods"] == 0
    assert res["cells"]["sync@4"]["missed_periods"] >= 4
    # asynchronous: only the first chunk is waited for (the delay fits in half a chunk)
    assert res["cells"]["async@4"]["missed_periods"] == pytest.approx(4)
    assert math.isfinite(res["cells"]["rtc@4"]["boundary_jump"])
    assert (tmp_path / "latency.png").stat().st_size > 0
    assert "| rtc |" in (tmp_path / "latency.md").read_text() == markdown(res)
    with pytest.raises(ConfigError, match="methods \\['bidirectional'\\]"):
        LatencyConfig(methods=("bidirectional",))
    with pytest.raises(ConfigError, match="eval_seed=10 may overlap"):
        LatencyConfig(eval_seed=10)
