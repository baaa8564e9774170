"""The one config (de)serialisation helper: JSON round trip, nested configs, unknown keys."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from embodied.config import config_from_dict, config_to_dict
from embodied.errors import CheckpointError, ConfigError


@dataclass
class Inner:
    sizes: tuple[int, ...] = (1, 2)


@dataclass
class Outer:
    name: str = "x"
    pairs: tuple[tuple[float, float], ...] = ((0.0, 1.0),)
    maybe: tuple[str, ...] | None = None
    inner: Inner = field(default_factory=Inner)
    device: str = "cpu"


def test_round_trip_through_json_restores_tuples_and_nested_configs() -> None:
    cfg = Outer(name="y", pairs=((1.0, 2.0), (3.0, 4.0)), maybe=("a",), inner=Inner((3,)))
    data = json.loads(json.dumps(config_to_dict(cfg)))
    assert data["pairs"] == [[1.0, 2.0], [3.0, 4.0]] and data["inner"] == {"sizes": [3]}
    assert config_from_dict(Outer, data, what="outer") == cfg


def test_excluded_fields_are_not_written() -> None:
    assert "device" not in config_to_dict(Outer(), exclude=("device",))


def test_unknown_keys_are_refused_naming_them_and_the_valid_keys() -> None:
    with pytest.raises(ConfigError, match=r"outer has unknown key\(s\) \['bogus'\]") as info:
        config_from_dict(Outer, {"bogus": 1}, what="outer")
    assert "'inner'" in str(info.value) and "fix:" in str(info.value)
    with pytest.raises(CheckpointError, match="nested"):
        config_from_dict(Outer, {"nested": 1}, what="outer", error=CheckpointError)
    with pytest.raises(ConfigError, match=r"Inner has unknown key\(s\) \['x'\]"):
        config_from_dict(Outer, {"inner": {"x": 1}}, what="outer")


def test_ignored_keys_are_dropped() -> None:
    assert config_from_dict(Outer, {"policy_type": "pdp"}, what="o", ignore=("policy_type",)) == (
        Outer()
    )
