"""Validation of the tuning page's commands: bad input is refused with a message naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from embodied.apps.tune.commands import COMMANDS, Command, ValidationContext, parse_command
from embodied.apps.tune.configuration_tune import ServerConfig, TuneConfig, is_loopback
from embodied.apps.tune.session import TuneSession, default_builder
from embodied.errors import ConfigError

PID = {
    "kp": 1.0,
    "ki": 20.0,
    "kd": 0.0,
    "output_min": -1.0,
    "output_max": 1.0,
    "rate_limit": None,
    "bias": 0.0,
}


@pytest.fixture
def ctx(tmp_path: Path) -> ValidationContext:
    return ValidationContext(
        setpoint_range=(0.0, 0.3),
        knob_range=(-1.0, 1.0),
        params={"pid": PID, "fixed": {"value": 0.0}},
        build=default_builder,
        out_dir=tmp_path,
    )


def test_good_commands_are_typed(ctx: ValidationContext) -> None:
    assert parse_command({"cmd": "setpoint", "value": "0.2"}, ctx) == Command(
        "setpoint", {"value": 0.2}
    )
    cmd = parse_command({"cmd": "gains", "params": {"kp": "2.5", "ki": 40, "rate_limit": "3"}}, ctx)
    assert cmd.args == {"type": "pid", "params": {"kp": 2.5, "ki": 40.0, "rate_limit": 3.0}}
    assert parse_command({"cmd": "gains", "params": {"rate_limit": ""}}, ctx).args["params"] == {
        "rate_limit": None
    }
    assert parse_command(
        {"cmd": "gains", "type": "fixed", "params": {"value": "-0.5"}}, ctx
    ).args == {"type": "fixed", "params": {"value": -0.5}}
    assert parse_command({"cmd": "controller", "type": "off"}, ctx).args == {"type": "off"}
    assert parse_command({"cmd": "new_seed", "seed": "7"}, ctx).args == {"seed": 7}
    assert parse_command({"cmd": "step_test", "from": 0.08, "to": "0.15"}, ctx).args == {
        "from": 0.08,
        "to": 0.15,
    }
    assert parse_command({"cmd": "save", "name": "best"}, ctx).args == {"name": "best.yaml"}
    assert (
        parse_command({"cmd": "autotune", "budget": "6", "from": 0.1, "to": 0.2}, ctx).args[
            "budget"
        ]
        == 6
    )


@pytest.mark.parametrize(
    ("message", "needle"),
    [
        ("not an object", "must be a JSON object"),
        ({"value": 1}, "unknown command None"),
        ({"cmd": "explode"}, "unknown command 'explode'"),
        ({"cmd": "setpoint", "value": "abc"}, "setpoint must be a number, got 'abc'"),
        ({"cmd": "setpoint", "value": True}, "must be a number"),
        ({"cmd": "setpoint", "value": None}, "must be a number"),
        ({"cmd": "setpoint", "value": "inf"}, "must be finite"),
        ({"cmd": "setpoint", "value": 0.5}, "setpoint 0.5 outside [0, 0.3]"),
        ({"cmd": "setpoint", "value": -0.1}, "outside"),
        ({"cmd": "gains", "params": {"kp": -1}}, "PID: kp=-1.0 must be >= 0"),
        ({"cmd": "gains", "params": {"kp": "abc"}}, "pid kp must be a number, got 'abc'"),
        ({"cmd": "gains", "params": {"ki": "nan"}}, "must be finite"),
        ({"cmd": "gains", "params": {"kq": 1}}, "has no parameter 'kq'"),
        ({"cmd": "gains", "params": [1, 2]}, "params must be an object"),
        (
            {"cmd": "gains", "params": {"output_min": 0.5, "output_max": 0.2}},
            "must be < output_max",
        ),
        ({"cmd": "gains", "params": {"output_max": 5}}, "outside the knob range"),
        ({"cmd": "gains", "params": {"output_min": None}}, "outside the knob range"),
        ({"cmd": "gains", "params": {"output_min": ""}}, "output_min must be a number"),
        ({"cmd": "gains", "params": {"rate_limit": 0}}, "rate_limit=0.0 must be > 0"),
        (
            {"cmd": "gains", "type": "fixed", "params": {"value": 2}},
            "fixed value 2 outside [-1, 1]",
        ),
        ({"cmd": "gains", "type": "rl", "params": {}}, "gains apply to pid or fixed"),
        ({"cmd": "controller", "type": "lqr"}, "controller type 'lqr' is not one of"),
        ({"cmd": "controller", "type": "rl"}, "needs a saved controller"),
        (
            {"cmd": "controller", "type": "rl", "path": "../../etc/passwd"},
            "must be the name of a file",
        ),
        ({"cmd": "controller", "type": "rl", "path": "missing.yaml"}, "does not exist"),
        ({"cmd": "new_seed", "seed": 1.5}, "must be an integer"),
        ({"cmd": "new_seed", "seed": -3}, "outside"),
        ({"cmd": "step_test", "from": 0.1, "to": 0.1}, "zero size"),
        ({"cmd": "step_test", "from": 0.1}, "step end must be a number"),
        ({"cmd": "autotune", "budget": 0, "from": 0.1, "to": 0.2}, "budget 0 outside [1, 50]"),
        ({"cmd": "save", "name": "../escape"}, "file name '../escape' is not allowed"),
        ({"cmd": "save", "name": ".hidden"}, "is not allowed"),
        ({"cmd": "load", "name": 5}, "is not allowed"),
    ],
)
def test_bad_commands_are_refused_naming_the_value(
    ctx: ValidationContext, message: object, needle: str
) -> None:
    with pytest.raises(ConfigError) as err:
        parse_command(message, ctx)
    assert needle in str(err.value)
    assert "fix:" in str(err.value) or "known" in str(err.value) or "commands:" in str(err.value)


def test_server_refuses_non_loopback_without_token() -> None:
    assert ServerConfig().host == "127.0.0.1"
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        assert is_loopback(host)
        ServerConfig(host=host)  # fine without a token
    for host in ("0.0.0.0", "192.168.1.5", "::", "example.org"):
        assert not is_loopback(host)
        with pytest.raises(ConfigError, match="without a token"):
            ServerConfig(host=host)
        ServerConfig(host=host, token="s3cret-token")
    with pytest.raises(ConfigError, match="too short"):
        ServerConfig(host="0.0.0.0", token="short")
    with pytest.raises(ConfigError, match="at least 10 updates"):
        ServerConfig(telemetry_hz=5)


def test_tune_config_validates() -> None:
    with pytest.raises(ConfigError, match="controller='lqr'"):
        TuneConfig(controller="lqr")
    with pytest.raises(ConfigError, match="settle_band"):
        TuneConfig(settle_band=1.5)


def test_every_command_has_a_handler() -> None:
    assert set(COMMANDS) == set(TuneSession.HANDLERS)
