"""One way to (de)serialise config dataclasses: ``config_to_dict`` and ``config_from_dict``.

Every config of the stack (PDP, OpenVLA, RL and PID controllers, LIBERO protocol, judges) is a
dataclass whose fields carry their defaults; checkpoints store it as JSON. These two helpers
do the round trip the same way everywhere:

* tuples become lists on the way out and lists become tuples again on the way in, for every
  field annotated as a tuple (JSON has no tuples);
* a field whose type is itself a config dataclass is written as an object and rebuilt;
* unknown keys are refused with an error naming them and the valid keys - a checkpoint from a
  newer version, or a typo, never loads silently half-understood.

``check_options`` applies the same rule to the keyword options of a policy or expert
(``--policy-arg key=value``): known names only, values converted to the annotated types.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import inspect
import math
import types
import typing
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

from embodied.errors import ConfigError, EmbodiedError

C = TypeVar("C")


def config_to_dict(config: Any, *, exclude: Collection[str] = ()) -> dict[str, Any]:
    """JSON-serialisable dict of the dataclass ``config`` (nested configs included).

    Args:
        config: A dataclass instance.
        exclude: Field names left out (e.g. runtime choices such as ``device``).
    """
    return {
        f.name: _jsonable(getattr(config, f.name))
        for f in dataclasses.fields(config)
        if f.init and f.name not in exclude
    }


def config_from_dict(
    cls: type[C],
    data: Mapping[str, Any],
    *,
    what: str,
    ignore: Collection[str] = (),
    error: type[EmbodiedError] = ConfigError,
    fix: str | None = None,
) -> C:
    """Build the dataclass ``cls`` from ``data`` (the inverse of :func:`config_to_dict`).

    Args:
        cls: The config dataclass.
        data: Field values, as read from JSON or YAML.
        what: What the config configures, for the message (e.g. ``"PDP config"``).
        ignore: Keys that may appear in ``data`` but are not fields (derived values, format
            tags such as ``policy_type``); they are dropped.
        error: The error class for unknown keys (``CheckpointError`` for checkpoints).
        fix: How to fix unknown keys (default: use only the valid keys, listed).

    Raises:
        EmbodiedError: ``error`` naming the unknown keys and the valid ones; the dataclass's
            own validation errors pass through.
    """
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(fields) - set(ignore))
    if unknown:
        raise error(
            f"{what} has unknown key(s) {unknown}",
            fix=fix or f"use only the keys {sorted(fields)}",
        )
    hints = _type_hints(cls)  # type: ignore[arg-type]
    kwargs = {}
    for key, value in data.items():
        if key not in fields:
            continue
        hint = hints.get(key, _EMPTY)
        try:  # each value of the type its field declares (a file can hold anything)
            kwargs[key] = _convert(hint, _from_json(hint, value))
        except EmbodiedError:
            raise  # a nested config's own error (unknown key, bad value) names it already
        except (TypeError, ValueError, OverflowError):
            raise error(
                f"{what} key {key}={value!r} is not {_describe(hint)}",
                fix=f"set {key} to {_describe(hint)}, or re-save the file",
            ) from None
    return cls(**kwargs)


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return config_to_dict(value)
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _from_json(hint: Any, value: Any) -> Any:
    """``value`` shaped for a field annotated ``hint``: lists to tuples, dicts to dataclasses.

    Raises:
        TypeError: ``hint`` is a config dataclass (not optional) and ``value`` no object.
    """
    if hint is None:
        return value
    if isinstance(hint, type) and dataclasses.is_dataclass(hint) and not isinstance(value, Mapping):
        raise TypeError(f"{value!r} is not an object")  # e.g. "vision": null
    if value is None:
        return value
    options = typing.get_args(hint) if _is_union(hint) else (hint,)
    for option in options:
        origin = typing.get_origin(option) or option
        if origin is tuple and isinstance(value, list | tuple):
            args = typing.get_args(option)
            inner = args[0] if len(args) == 2 and args[1] is Ellipsis else None
            if inner is not None and typing.get_origin(inner) is tuple:
                return tuple(_from_json(inner, v) for v in value)
            return tuple(value)
        is_config = isinstance(origin, type) and dataclasses.is_dataclass(origin)
        if is_config and isinstance(value, Mapping):
            return config_from_dict(origin, value, what=origin.__name__)
    return value


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


_EMPTY = inspect.Parameter.empty


def check_options(
    target: Callable[..., Any],
    options: Mapping[str, Any],
    what: str,
    *,
    skip: Collection[str] = ("self", "env"),
) -> dict[str, Any]:
    """Check keyword ``options`` for ``target`` (a function or class) by its signature.

    One rule for every policy and expert option (``--policy-arg key=value``): each name must be
    a parameter of ``target`` and each value must fit its annotation. Values given as text (the
    command line) are converted: ``"0.3"`` for a float, ``"2"`` for an int, ``"true"`` for a
    bool; a list for a tuple annotation.

    Args:
        target: What the options are passed to (a class: its ``__init__``).
        options: Name -> value.
        what: How the error names the receiver (``"policy 'sine'"``).
        skip: Parameters that are not options (set by the caller).

    Returns:
        The options with converted values.

    Raises:
        ConfigError: an unknown name, or a value of the wrong type; the message names the key,
            the value and what it takes.
    """
    fn = target.__init__ if isinstance(target, type) else target  # type: ignore[misc]
    params = {
        name: p
        for name, p in inspect.signature(fn).parameters.items()
        if name not in skip and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # an annotation that does not resolve: check names only
        hints = {}
    unknown = sorted(set(options) - set(params))
    if unknown:
        known = ", ".join(params) or "none"
        raise ConfigError(
            f"{what} got unknown option(s) {unknown}; its options: {known}",
            fix=f"pass only {known} (e.g. --policy-arg {next(iter(params), 'key')}=...)",
        )
    out: dict[str, Any] = {}
    for name, value in options.items():
        hint = hints.get(name, _EMPTY)
        try:
            out[name] = _convert(hint, value)
        except (TypeError, ValueError):
            raise ConfigError(
                f"{what} option {name}={value!r} is not {_describe(hint)}",
                fix=f"pass {name} as {_describe(hint)}",
            ) from None
    return out


def _convert(hint: Any, value: Any) -> Any:
    """``value`` as ``hint`` takes it; raises TypeError/ValueError if it cannot be."""
    if hint is _EMPTY or hint is Any:
        return value
    if _is_union(hint):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, value)
            except (TypeError, ValueError):
                continue
        raise ValueError(value)
    origin = typing.get_origin(hint) or hint
    if origin is typing.Literal:
        if value in typing.get_args(hint):
            return value
        raise ValueError(value)
    if origin is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
            return value.lower() in ("true", "1")
        raise ValueError(value)
    if origin is float:
        if isinstance(value, bool):
            raise TypeError(value)
        number = float(value)  # int, float or numeric text
        if isinstance(value, str) and not math.isfinite(number):
            raise ValueError(value)
        return number
    if origin is int:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise TypeError(value)
        return int(value)
    if origin is str:
        if not isinstance(value, str):
            raise TypeError(value)
        return value
    if origin in (tuple, list) or origin is collections.abc.Sequence:
        if isinstance(value, str) or not isinstance(value, list | tuple):
            raise TypeError(value)
        items_hint = [a for a in typing.get_args(hint) if a is not Ellipsis]
        if origin is tuple and items_hint and Ellipsis not in typing.get_args(hint):
            if len(items_hint) != len(value):
                raise ValueError(value)
            return tuple(_convert(a, v) for a, v in zip(items_hint, value, strict=True))
        inner = items_hint[0] if items_hint else _EMPTY
        items = [_convert(inner, v) for v in value]
        return tuple(items) if origin is tuple else items
    return value


def _describe(hint: Any) -> str:
    """What a value of ``hint`` is, in words."""
    if hint is _EMPTY or hint is Any:
        return "any value"
    if _is_union(hint):
        return " or ".join(_describe(a) for a in typing.get_args(hint))
    origin = typing.get_origin(hint) or hint
    words = {float: "a number", int: "an integer", bool: "true or false", str: "a string"}
    if origin is type(None):
        return "null"
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    if origin in (tuple, list) or origin is collections.abc.Sequence:
        return "a list such as [0.2, 0.4]"
    if isinstance(origin, type) and dataclasses.is_dataclass(origin):
        return f"an object ({origin.__name__})"
    return words.get(origin, getattr(origin, "__name__", str(origin)))
