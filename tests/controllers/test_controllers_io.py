"""YAML save/load of controllers (`--controller gains.yaml`)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

import controllers
from controllers.fixed import FixedController
from controllers.pid import PIDController
from embodied.errors import ConfigError, UnknownNameError


def test_pid_round_trip_gives_identical_outputs(tmp_path: Path) -> None:
    pid = PIDController(
        kp=0.8,
        ki=2.0,
        kd=0.01,
        derivative_cutoff_hz=5.0,
        output_min=-1.0,
        rate_limit=4.0,
        anti_windup="back_calculation",
        tracking_gain=3.0,
        kff=0.5,
        feedforward_table=((0.05, -0.2), (0.15, 0.3)),
    )
    path = controllers.save(pid, tmp_path / "gains.yaml", meta={"setpoint": 0.12})
    data = yaml.safe_load(path.read_text())
    assert data["type"] == "pid" and data["kp"] == 0.8 and data["output_max"] is None
    assert controllers.read_meta(path) == {"setpoint": 0.12}
    loaded = controllers.load(path)
    assert isinstance(loaded, PIDController)
    assert loaded.config == pid.config
    meas = [0.0, 0.05, 0.1, 0.2, 0.15, math.nan, 0.12]
    assert [pid.update(m, 0.12, 0.05) for m in meas] == [loaded.update(m, 0.12, 0.05) for m in meas]
    assert not list(tmp_path.glob("*.tmp"))  # atomic write leaves no temp files


def test_fixed_round_trip(tmp_path: Path) -> None:
    loaded = controllers.load(controllers.save(FixedController(0.4), tmp_path / "f.yaml"))
    assert isinstance(loaded, FixedController) and loaded.update(1.0, 0.0, 0.1) == 0.4


@pytest.mark.parametrize(
    ("text", "exc", "match"),
    [
        ("kp: 1.0\n", ConfigError, "no 'type'"),
        ("type: pidd\nkp: 1\n", UnknownNameError, "pidd"),
        ("type: pid\nkp: -2\n", ConfigError, "kp=-2"),
        ("type: pid\nkpp: 1\n", ConfigError, "kpp"),
        ("type: fixed\nvalu: 1\n", ConfigError, "valu"),
        ("type: pid\nanti_windup: clamp\n", ConfigError, "clamp"),
        ("- 1\n- 2\n", ConfigError, "mapping"),
        ("type: pid\nkp: [1\n", ConfigError, "not valid YAML"),
    ],
)
def test_bad_files_name_the_problem(tmp_path: Path, text: str, exc: type, match: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(exc, match=match) as info:
        controllers.load(path)
    assert "bad.yaml" in str(info.value) or exc is UnknownNameError


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        controllers.load(tmp_path / "nope.yaml")
