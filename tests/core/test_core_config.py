"""The one config helper: JSON round trip, nested configs, unknown keys, and validation
(checked fields, cross-field rules, dotted keys of nested configs)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import ClassVar

import pytest

from embodied.config import Rule, checked, config_from_dict, config_to_dict, nested, validate
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


# ---- validation: checked fields, rules, nested keys -------------------------------------


@dataclass
class Knob:
    size: int = checked(2, ge=1, fix="use e.g. 2")
    dims: tuple[int, ...] = checked((0, 1), ge=0, min_len=1)

    def __post_init__(self) -> None:
        validate(self)


@dataclass
class Net:
    lr: float = checked(1e-3, gt=0, fix="use e.g. 1e-3")
    dropout: float = checked(0.1, ge=0, lt=1)
    decay: float = checked(0.9, gt=0, le=1)
    mode: str = checked("a", choices=("a", "b"))
    name: str = checked("net", min_len=1, fix="name the net")
    d_model: int = 8
    n_heads: int = checked(2, ge=1)
    limit: float = checked(1.0, gt=0, finite=False)
    knob: Knob = field(default_factory=Knob)

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "d_model",
            lambda c: c.d_model % c.n_heads == 0,
            "is not divisible by n_heads={n_heads}",
            "pick n_heads that divides d_model",
        ),
    )

    def __post_init__(self) -> None:
        self.knob = nested(Knob, self.knob, "knob", self)
        validate(self)


def test_valid_configs_pass() -> None:
    assert Net().knob == Knob()
    assert Net(limit=math.inf, knob={"size": 3}).knob.size == 3  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "needle", "fix"),
    [
        ({"lr": 0.0}, "Net: lr=0.0 must be > 0", "use e.g. 1e-3"),
        ({"dropout": -0.5}, "dropout=-0.5 must be >= 0", "use a value >= 0 and < 1"),
        ({"dropout": 1.0}, "dropout=1.0 must be < 1", "use a value >= 0 and < 1"),
        ({"decay": 1.5}, "decay=1.5 must be <= 1", "use a value > 0 and <= 1"),
        ({"mode": "c"}, "mode='c' must be one of ('a', 'b')", "use one of ('a', 'b')"),
        ({"name": ""}, "name='' must not be empty", "name the net"),
        ({"lr": math.nan}, "lr=nan must be a number, not NaN", "use e.g. 1e-3"),
        ({"lr": math.inf}, "lr=inf must be finite", "use e.g. 1e-3"),
        ({"lr": "fast"}, "lr='fast' must be a number", "use e.g. 1e-3"),
        ({"lr": True}, "lr=True must be a number, not a bool", "use e.g. 1e-3"),
        ({"n_heads": True}, "n_heads=True must be an integer, not a bool", "give a number"),
        ({"d_model": False}, "d_model=False must be an integer, not a bool", "give a number"),
    ],
)
def test_each_constraint_names_key_value_and_fix(
    kw: dict[str, object], needle: str, fix: str
) -> None:
    with pytest.raises(ConfigError) as info:
        Net(**kw)  # type: ignore[arg-type]
    assert needle in str(info.value) and info.value.fix == fix


def test_inf_passes_only_where_not_required_finite_and_nan_never() -> None:
    assert math.isinf(Net(limit=math.inf).limit)
    with pytest.raises(ConfigError, match="limit=nan must be a number, not NaN"):
        Net(limit=math.nan)


def test_cross_field_rule_is_checked_after_the_fields() -> None:
    with pytest.raises(ConfigError, match=r"d_model=9 is not divisible by n_heads=2") as info:
        Net(d_model=9)
    assert info.value.fix == "pick n_heads that divides d_model"
    with pytest.raises(ConfigError, match="n_heads=0 must be >= 1"):  # not a ZeroDivisionError
        Net(n_heads=0)


@pytest.mark.parametrize(
    ("knob", "needle"),
    [
        ({"size": 0}, "Net: knob.size=0 must be >= 1"),
        ({"dims": ()}, "Net: knob.dims=() has 0 item(s), fewer than 1"),
        ({"dims": (0, -1)}, "Net: knob.dims[1]=-1 must be >= 0"),
    ],
)
def test_nested_config_errors_carry_the_dotted_key(knob: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        Net(knob=knob)  # type: ignore[arg-type]
    assert needle in str(info.value)
    with pytest.raises(ConfigError) as again:  # the same from a JSON dict
        config_from_dict(Net, {"knob": knob}, what="net")
    assert needle in str(again.value)


def test_a_nested_config_changed_after_construction_is_checked_by_its_parent() -> None:
    knob = Knob()
    knob.size = 0
    with pytest.raises(ConfigError, match=r"Net: knob\.size=0 must be >= 1 \(fix: use e.g. 2\)"):
        Net(knob=knob)


def test_checked_fields_keep_their_defaults_and_round_trip() -> None:
    net = Net(mode="b", knob=Knob(dims=(2,)))
    assert config_from_dict(Net, json.loads(json.dumps(config_to_dict(net))), what="n") == net


@dataclass(frozen=True)
class Typed:
    count: int = checked(1, ge=0)
    rate: float = checked(1.0, gt=0)
    name: str = checked("a")
    flag: bool = checked(False)
    sizes: tuple[int, int] = checked((1, 1), gt=0, min_len=2, max_len=2)
    knob: Knob | None = checked(None)

    def __post_init__(self) -> None:
        validate(self, prefix="section[2]")


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"count": 1.0}, "count=1.0 must be an integer"),
        ({"count": None}, "count=None must not be None"),
        ({"rate": "0.5"}, "rate='0.5' must be a number"),
        ({"rate": [1.0]}, "rate=[1.0] must be a number"),
        ({"rate": 10**400}, "must be finite"),
        ({"name": 5}, "name=5 must be a string"),
        ({"flag": 1}, "flag=1 must be true or false"),
        ({"sizes": 96}, "sizes=96 must be a list"),
        ({"sizes": "ab"}, "sizes='ab' must be a list"),
        ({"sizes": (96,)}, "sizes=(96,) has 1 item(s), fewer than 2"),
        ({"sizes": (96, True)}, "sizes[1]=True must be an integer, not a bool"),
        ({"sizes": (96.5, 96)}, "sizes[0]=96.5 must be an integer"),
        ({"sizes": (96, 0)}, "sizes[1]=0 must be > 0"),
        ({"knob": 5}, "knob=5 must be a Knob"),
    ],
)
def test_checked_fields_hold_their_annotated_type(kw: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        Typed(**kw)  # type: ignore[arg-type]
    assert f"Typed: section[2].{needle}" in str(info.value) or needle in str(info.value)
    assert "section[2]." in str(info.value) and info.value.fix


def test_a_known_prefix_dots_every_key() -> None:
    with pytest.raises(ConfigError, match=r"Typed: section\[2\]\.count=-1 must be >= 0"):
        Typed(count=-1)
    assert Typed(knob=Knob(), sizes=[2, 3]).sizes == [2, 3]  # type: ignore[arg-type]
