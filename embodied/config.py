"""One way to (de)serialise config dataclasses: ``config_to_dict`` and ``config_from_dict``.

Every config of the stack (PDP, OpenVLA, RL and PID controllers, LIBERO protocol, judges) is a
dataclass whose fields carry their defaults; checkpoints store it as JSON. These two helpers
do the round trip the same way everywhere:

* tuples become lists on the way out and lists become tuples again on the way in, for every
  field annotated as a tuple (JSON has no tuples);
* a field whose type is itself a config dataclass is written as an object and rebuilt;
* unknown keys are refused with an error naming them and the valid keys - a checkpoint from a
  newer version, or a typo, never loads silently half-understood.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Collection, Mapping
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
    kwargs = {k: _from_json(hints.get(k), v) for k, v in data.items() if k in fields}
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
    """``value`` shaped for a field annotated ``hint``: lists to tuples, dicts to dataclasses."""
    if value is None or hint is None:
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
