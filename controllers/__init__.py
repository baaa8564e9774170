"""Closed-loop controllers that set a policy knob from a measured concept signal.

``controllers.make(name, **params)`` builds a registered controller (``fixed``, ``pid``,
``rl``); ``controllers.load(path)`` reads a YAML file with a ``type`` key and its parameters
and ``controllers.save(controller, path)`` writes one (atomically), e.g.::

    type: pid
    kp: 0.8
    ki: 2.0
    output_min: -1.0
    output_max: 1.0
    meta: {concept: ee_speed, setpoint: 0.12, knob: alpha}   # optional, ignored by load()

Controllers with weights (``rl``) store them in a folder beside the YAML file
(``<stem>.rl/``: safetensors + JSON) and the YAML names it with ``path``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from embodied.contracts import Controller
from embodied.errors import ConfigError, UnknownNameError
from embodied.io import write_text
from embodied.registry import Registry

CONTROLLERS: Registry[Controller] = Registry(
    "controller", plugins=("controllers.fixed", "controllers.pid", "controllers.rl")
)

META_KEY = "meta"
"""Optional YAML mapping with free-form context (concept, setpoint, knob); not a parameter."""


def make(name: str, **params: Any) -> Controller:
    """Build controller ``name`` with ``params``."""
    return CONTROLLERS.make(name, **params)


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(
            f"controller file {str(path)!r} does not exist",
            fix="save one with `embodied tune` (Save gains) or controllers.save()",
        )
    try:
        data = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as exc:  # a damaged file is not UTF-8 either
        raise ConfigError(
            f"controller file {str(path)!r} is not valid YAML: {exc}",
            fix="save the gains again (embodied tune: Save gains) or repair the file",
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(
            f"controller file {str(path)!r} must hold a mapping with a 'type' key, got "
            f"{type(data).__name__}",
            fix="write e.g. 'type: pid' followed by the parameters",
        )
    return data


def read_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The optional ``meta`` mapping of a controller YAML file (empty if absent)."""
    meta = _read_yaml(Path(path)).get(META_KEY) or {}
    if not isinstance(meta, dict):
        raise ConfigError(f"{path}: 'meta' must be a mapping, got {meta!r}")
    return meta


def read_params(path: str | os.PathLike[str]) -> tuple[str, dict[str, Any]]:
    """The controller type and parameters a YAML file holds, as :func:`load` reads them
    (a relative ``path`` parameter resolved against the file's folder), without building it.

    Raises:
        ConfigError: missing file, bad YAML or no ``type`` (the message names them).
        UnknownNameError: ``type`` is not a registered controller.
    """
    file = Path(path)
    data = _read_yaml(file)
    params = {k: v for k, v in data.items() if k != META_KEY}
    if "type" not in params:
        raise ConfigError(
            f"controller file {str(file)!r} has no 'type' key (keys: {sorted(params)})",
            fix=f"add 'type: <one of {CONTROLLERS.names()}>'",
        )
    name = params.pop("type")
    if not isinstance(name, str) or name not in CONTROLLERS:
        raise UnknownNameError(
            f"controller file {str(file)!r}: unknown controller type {name!r}; "
            f"known: {CONTROLLERS.names()}",
            fix="set 'type' to a known controller",
        )
    if isinstance(params.get("path"), str) and not Path(params["path"]).is_absolute():
        params["path"] = str(file.parent / params["path"])
    return name, params


def load(path: str | os.PathLike[str]) -> Controller:
    """Build the controller described by a YAML file.

    Args:
        path: YAML file with ``type`` (a registered controller name) and its parameters.
            A relative ``path`` parameter (weights folder) is resolved against the file's folder.

    Raises:
        ConfigError: missing file, bad YAML, missing ``type``, unknown or invalid parameters
            (the message names them).
        UnknownNameError: ``type`` is not a registered controller.
    """
    file = Path(path)
    name, params = read_params(file)
    try:
        return CONTROLLERS.make(name, **params)
    except TypeError as exc:  # unexpected keyword from a factory
        raise ConfigError(
            f"controller file {str(file)!r}: bad parameters for {name!r}: {exc}",
            fix="remove or rename the parameter",
        ) from exc
    except ConfigError as exc:
        raise ConfigError(f"controller file {str(file)!r}: {exc}") from exc


def save(
    controller: Controller, path: str | os.PathLike[str], meta: dict[str, Any] | None = None
) -> Path:
    """Atomically write ``controller`` as YAML that :func:`load` reads back.

    Args:
        controller: A controller with ``type_name`` and ``to_config()`` (or ``save_pretrained``
            for controllers with weights, stored in ``<stem>.<type>/`` beside the file).
        path: Destination ``.yaml`` file.
        meta: Optional context stored under ``meta`` (concept, setpoint, knob, ...).

    Returns:
        The written path.
    """
    file = Path(path)
    type_name = getattr(controller, "type_name", None)
    if not isinstance(type_name, str) or type_name not in CONTROLLERS:
        raise ConfigError(
            f"cannot save {type(controller).__name__}: no registered 'type_name' ({type_name!r})",
            fix=f"give the class a type_name from {CONTROLLERS.names()}",
        )
    if hasattr(controller, "save_pretrained"):
        folder = file.parent / f"{file.stem}.{type_name}"
        controller.save_pretrained(folder)
        params: dict[str, Any] = {"path": folder.name}
    elif hasattr(controller, "to_config"):
        params = dict(controller.to_config())
    else:
        raise ConfigError(f"cannot save {type(controller).__name__}: it has no to_config()")
    data: dict[str, Any] = {"type": type_name, **params}
    if meta:
        data[META_KEY] = dict(meta)
    write_text(file, yaml.safe_dump(data, sort_keys=False))
    return file
