"""Parsing and validation of the commands the tuning page sends.

Every command is a JSON object ``{"cmd": <name>, ...}``. :func:`parse_command` turns it into
a :class:`Command` whose arguments are typed, finite and in range, or raises
:class:`~embodied.errors.ConfigError` naming the bad value and the fix; the session applies
only parsed commands, so malformed input never reaches the controller. Controller parameters
are checked by building a throw-away controller with the merged parameters, i.e. by the
controller config's own validation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embodied.apps.tune.configuration_tune import SAFE_NAME
from embodied.errors import ConfigError, EmbodiedError

CONTROLLER_TYPES = ("off", "fixed", "pid", "rl")
"""``off`` leaves the knob at its default; the others are ``controllers.make`` names."""

MAX_COMMAND_BYTES = 4096
MAX_BUDGET = 50


@dataclass(frozen=True)
class Command:
    """A validated command.

    Attributes:
        name: Command name (one of :data:`COMMANDS`).
        args: Typed arguments (floats are finite; names are safe file names).
    """

    name: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ValidationContext:
    """What command validation needs to know about the running session.

    Args:
        setpoint_range: Allowed setpoints (concept units), inclusive.
        knob_range: Allowed values of the driven knob (for ``fixed``), inclusive.
        params: Current parameters of each controller type (``pid`` -> {kp: ...}).
        build: ``build(type, params)`` constructs a controller (raising ``ConfigError`` on
            invalid parameters) without touching the live one.
        out_dir: The only folder the page may read controllers from.
    """

    setpoint_range: tuple[float, float]
    knob_range: tuple[float, float]
    params: Mapping[str, Mapping[str, Any]]
    build: Callable[[str, dict[str, Any]], object]
    out_dir: Path | None = None


def _number(value: Any, what: str) -> float:
    """``value`` as a finite float; numeric strings (from text inputs) are accepted."""
    if isinstance(value, bool) or value is None:
        raise ConfigError(f"{what} must be a number, got {value!r}", fix="enter a number like 0.5")
    if isinstance(value, str):
        text = value.strip()
        try:
            out = float(text)
        except ValueError:
            raise ConfigError(
                f"{what} must be a number, got {value!r}", fix="enter a number like 0.5"
            ) from None
    elif isinstance(value, int | float):
        out = float(value)
    else:
        raise ConfigError(f"{what} must be a number, got {value!r}", fix="enter a number like 0.5")
    if not math.isfinite(out):
        raise ConfigError(f"{what} must be finite, got {value!r}", fix="enter a finite number")
    return out


def _in_range(value: float, lo: float, hi: float, what: str) -> float:
    if not lo <= value <= hi:
        raise ConfigError(
            f"{what} {value:g} outside [{lo:g}, {hi:g}]", fix=f"enter a value in [{lo:g}, {hi:g}]"
        )
    return value


def _int(value: Any, what: str, lo: int, hi: int) -> int:
    num = _number(value, what)
    if num != int(num):
        raise ConfigError(f"{what} must be an integer, got {value!r}", fix="enter a whole number")
    return int(_in_range(num, lo, hi, what))


def _name(value: Any) -> str:
    if not isinstance(value, str) or not SAFE_NAME.match(value.strip()):
        raise ConfigError(
            f"file name {value!r} is not allowed",
            fix="use 1-64 letters, digits, '_', '-' or '.', starting with a letter or digit",
        )
    name = value.strip()
    return name if name.endswith((".yaml", ".yml")) else f"{name}.yaml"


def _params(ctx: ValidationContext, ctype: str, raw: Any) -> dict[str, Any]:
    """Merge ``raw`` parameter changes into ``ctype``'s current ones and validate them."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"params must be an object, got {raw!r}", fix='send {"kp": 1.0, ...}')
    current = dict(ctx.params.get(ctype, {}))
    changes: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in current:
            raise ConfigError(
                f"{ctype} controller has no parameter {key!r}; parameters: {sorted(current)}",
                fix="use one of the listed parameter names",
            )
        old = current[key]
        if value is None or (isinstance(value, str) and value.strip() == "" and old is None):
            changes[key] = None  # e.g. "no rate limit"
        elif isinstance(old, str):
            changes[key] = str(value)
        else:
            changes[key] = _number(value, f"{ctype} {key}")
    merged = {**current, **changes}
    lo, hi = ctx.knob_range
    if ctype == "fixed" and "value" in changes:
        _in_range(changes["value"], lo, hi, "fixed value")
    if ctype == "pid":
        for key, bound in (("output_min", lo), ("output_max", hi)):
            value = merged.get(key)
            if value is None or not lo <= value <= hi:
                raise ConfigError(
                    f"pid {key} {value!r} outside the knob range [{lo:g}, {hi:g}]",
                    fix=f"enter a limit in [{lo:g}, {hi:g}] (e.g. {bound:g})",
                )
    try:
        ctx.build(ctype, merged)
    except EmbodiedError as exc:
        raise ConfigError(f"{ctype} parameters refused: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{ctype} parameters refused: {exc}", fix="check the values") from None
    return changes


def parse_command(message: Any, ctx: ValidationContext) -> Command:
    """Validate one decoded JSON message from the page.

    Args:
        message: The decoded JSON value (must be an object with a ``cmd`` string).
        ctx: The session's current limits and controller parameters.

    Returns:
        The validated :class:`Command`.

    Raises:
        ConfigError: naming the bad field/value and how to fix it.
    """
    if not isinstance(message, Mapping):
        raise ConfigError(
            f"command must be a JSON object, got {message!r}", fix='send {"cmd": ...}'
        )
    name = message.get("cmd")
    if name not in COMMANDS:
        raise ConfigError(
            f"unknown command {name!r}; commands: {sorted(COMMANDS)}",
            fix="send one of the listed commands",
        )
    return COMMANDS[name](message, ctx)


def _setpoint(m: Mapping[str, Any], ctx: ValidationContext) -> Command:
    lo, hi = ctx.setpoint_range
    return Command(
        "setpoint", {"value": _in_range(_number(m.get("value"), "setpoint"), lo, hi, "setpoint")}
    )


def _gains(m: Mapping[str, Any], ctx: ValidationContext) -> Command:
    ctype = m.get("type", "pid")
    if ctype not in ("pid", "fixed"):
        raise ConfigError(
            f"gains apply to pid or fixed controllers, not {ctype!r}",
            fix='send "type": "pid" or "fixed" (RL controllers are loaded, not tuned)',
        )
    return Command("gains", {"type": ctype, "params": _params(ctx, ctype, m.get("params", {}))})


def _controller(m: Mapping[str, Any], ctx: ValidationContext) -> Command:
    ctype = m.get("type")
    if ctype not in CONTROLLER_TYPES:
        raise ConfigError(
            f"controller type {ctype!r} is not one of {list(CONTROLLER_TYPES)}",
            fix="pick off, fixed, pid or rl",
        )
    args: dict[str, Any] = {"type": ctype}
    if ctype == "rl":
        name = m.get("path")
        if name:
            if (
                not isinstance(name, str)
                or not SAFE_NAME.match(name.strip())
                or ctx.out_dir is None
            ):
                raise ConfigError(
                    f"RL controller {name!r} must be the name of a file or folder in the output folder",
                    fix="save or copy the RL controller into the output folder and enter its name",
                )
            path = str(ctx.out_dir / name.strip())
        else:
            path = str((ctx.params.get("rl") or {}).get("path") or "")
        if not path:
            raise ConfigError(
                "the rl controller needs a saved controller",
                fix="enter the name of its .yaml (or folder) in the output folder, or Load it",
            )
        try:
            ctx.build("rl", {"path": path})
        except EmbodiedError as exc:
            raise ConfigError(f"rl controller refused: {exc}") from None
        args["path"] = path
    return Command("controller", args)


def _plain(name: str) -> Callable[[Mapping[str, Any], ValidationContext], Command]:
    def parse(m: Mapping[str, Any], ctx: ValidationContext) -> Command:
        return Command(name)

    return parse


def _new_seed(m: Mapping[str, Any], ctx: ValidationContext) -> Command:
    seed = m.get("seed")
    return Command(
        "new_seed", {"seed": None if seed in (None, "") else _int(seed, "seed", 0, 2**31 - 1)}
    )


def _step_ends(m: Mapping[str, Any], ctx: ValidationContext) -> tuple[float, float]:
    """The ``from``/``to`` setpoints of a step, each within the setpoint range and distinct.

    Raises:
        ConfigError: an end is not a number, lies outside the range, or both are equal.
    """
    lo, hi = ctx.setpoint_range
    start = _in_range(_number(m.get("from"), "step start"), lo, hi, "step start")
    end = _in_range(_number(m.get("to"), "step end"), lo, hi, "step end")
    if start == end:
        raise ConfigError(
            f"step from {start:g} to {end:g} has zero size", fix="use two different setpoints"
        )
    return start, end


def _step_test(m: Mapping[str, Any], ctx: ValidationContext) -> Command:
    start, end = _step_ends(m, ctx)
    return Command("step_test", {"from": start, "to": end})


def _autotune(m: Mapping[str, Any], ctx: ValidationContext) -> Command:
    budget = _int(m.get("budget", 9), "auto-tune budget", 1, MAX_BUDGET)
    start, end = _step_ends(m, ctx)
    return Command("autotune", {"budget": budget, "from": start, "to": end})


def _save(m: Mapping[str, Any], ctx: ValidationContext) -> Command:
    return Command("save", {"name": _name(m.get("name"))})


def _load(m: Mapping[str, Any], ctx: ValidationContext) -> Command:
    return Command("load", {"name": _name(m.get("name"))})


COMMANDS: dict[str, Callable[[Mapping[str, Any], ValidationContext], Command]] = {
    "setpoint": _setpoint,
    "gains": _gains,
    "controller": _controller,
    "pause": _plain("pause"),
    "resume": _plain("resume"),
    "step": _plain("step"),
    "reset": _plain("reset"),
    "new_seed": _new_seed,
    "step_test": _step_test,
    "autotune": _autotune,
    "apply_proposal": _plain("apply_proposal"),
    "stop_job": _plain("stop_job"),
    "save": _save,
    "load": _load,
    "list": _plain("list"),
}
"""Command name -> parser."""
