"""The reference steerable plant on the MuJoCo arm: knob -> speed, PID tracking, figure."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import controllers
import policies
from controllers.analysis import tracking_rmse
from embodied.apps.plotting import plot_tracking
from embodied.apps.reference_task import REFERENCE_PID, pid_steered_rollout, reference_task
from embodied.contracts import Steerable
from embodied.errors import ConfigError
from embodied.loop import Steering, rollout
from policies.steerable_expert import SpeedKnobExpert


@pytest.fixture(scope="module")
def task():  # type: ignore[no-untyped-def]
    return reference_task(camera=False, max_episode_steps=200)


def test_registered_and_steerable(task) -> None:  # type: ignore[no-untyped-def]
    policy = policies.load("expert_speed_knob", env=task.env, base_speed=0.08)
    assert isinstance(policy, SpeedKnobExpert) and isinstance(policy, Steerable)
    assert set(policy.knobs()) == {"alpha"}
    with pytest.raises(ConfigError, match="alpha"):
        policy.set_knob("alpha", 1.5)
    with pytest.raises(ConfigError, match="gain"):
        SpeedKnobExpert(task.env, gain=0.5)
    with pytest.raises(ConfigError, match="base_speed"):
        SpeedKnobExpert(task.env, base_speed=0.0)


@pytest.mark.parametrize("alpha", [-1.0, -0.5, 0.0, 0.5])
def test_knob_sets_measured_cruise_speed(task, alpha: float) -> None:  # type: ignore[no-untyped-def]
    ep = rollout(
        task.env,
        task.policy,
        seed=0,
        record_images=False,
        steering=Steering(task.concept, controllers.make("fixed", value=alpha), "alpha", 0.1),
    )
    assert ep.success
    cruise = float(np.median(ep.measurements[2 : len(ep) // 2]))
    assert cruise == pytest.approx(0.1 * 3.0**alpha, rel=0.05)


def test_pid_tracks_setpoint_step_where_open_loop_cannot(task, artifacts_dir: Path) -> None:  # type: ignore[no-untyped-def]
    def setpoint(t_s: float) -> float:
        return 0.06 if t_s < 1.0 else 0.15

    runs = {}
    for label, ctrl in (
        ("no control (alpha=0)", None),
        ("fixed alpha=0.5", controllers.make("fixed", value=0.5)),
        ("PID", controllers.make("pid", **REFERENCE_PID)),
    ):
        runs[label] = rollout(
            task.env,
            task.policy,
            seed=0,
            record_images=False,
            steering=Steering(task.concept, ctrl, "alpha", setpoint),
        )
    rmse = {k: tracking_rmse(ep.measurements, ep.setpoints, skip=5) for k, ep in runs.items()}
    assert all(ep.success for ep in runs.values())
    assert rmse["PID"] < 0.5 * rmse["no control (alpha=0)"]
    assert rmse["PID"] < 0.5 * rmse["fixed alpha=0.5"]
    out = plot_tracking(runs, artifacts_dir / "controllers_pid_vs_open_loop.png", title="ee_speed")
    assert out.stat().st_size > 10_000


def test_demo_pid_rollout_and_comparison_table(tmp_path: Path) -> None:
    from embodied.apps.lab.controllers import compare

    ep = pid_steered_rollout(seed=0, record_images=False, camera=False)
    assert ep.success and ep.meta["steering_knob"] == "alpha"
    table = compare(tmp_path, seeds=1)
    assert set(table) == {"no control (alpha=0)", "fixed alpha=0.5", "PID"}
    assert table["PID"]["rmse_mps"] < table["no control (alpha=0)"]["rmse_mps"]  # type: ignore[operator]
    assert (tmp_path / "table.json").is_file() and (tmp_path / "tracking.png").is_file()


def test_steer_reference_cli_writes_the_table(tmp_path: Path) -> None:
    """`embodied lab steer reference`: PID tracks the step better than no control, table written."""
    import json

    from typer.testing import CliRunner

    from embodied.apps.cli import app

    out = tmp_path / "ref"
    result = CliRunner().invoke(
        app, ["lab", "steer", "reference", "--seeds", "1", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "PID" in result.output and (out / "tracking.png").exists()
    table = json.loads((out / "table.json").read_text())
    pid = next(row for label, row in table.items() if label == "PID")
    none = next(row for label, row in table.items() if label.startswith("no control"))
    assert pid["rmse_mps"] < 0.6 * none["rmse_mps"]
