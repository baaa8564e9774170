"""Save and load the session's controller as the YAML that ``embodied eval``/``deploy`` read.

Files live in the session's output folder only (the page sends a bare file name, never a
path); writes are atomic (``controllers.save`` writes through :func:`embodied.io.write_text`).
The functions take the session through the public surface :class:`GainsSession` (the session
imports this module, not the other way round).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import controllers
from embodied.apps.tune.configuration_tune import TuneConfig
from embodied.apps.tune.live_controller import LiveController
from embodied.apps.tune.task import TuneTask
from embodied.errors import ConfigError


class GainsSession(Protocol):
    """What saving and loading use of a :class:`~embodied.apps.tune.session.TuneSession`.

    Attributes:
        config: Its output folder (the only folder read or written).
        task: The tuned task (env id, concept, knob and setpoint range stored as ``meta``).
        live: The live controller saved, or replaced on load.
        setpoint: The live setpoint (stored on save; restored on load when in range).
    """

    config: TuneConfig
    task: TuneTask
    live: LiveController
    setpoint: float


def list_files(session: GainsSession) -> list[str]:
    """Gains files in the output folder, newest first.

    Args:
        session: The tuning session (its output folder).

    Returns:
        The file names (``.yaml``/``.yml``), newest first; none when the folder is missing.
    """
    folder = session.config.out_dir
    if not folder.is_dir():
        return []
    files = [p for p in folder.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file()]
    return [p.name for p in sorted(files, key=lambda p: p.stat().st_mtime, reverse=True)]


def save(session: GainsSession, name: str) -> Path:
    """Write the active controller (type, parameters, and context under ``meta``) to ``name``.

    Args:
        session: The tuning session.
        name: A validated file name in the output folder.

    Returns:
        The path written.

    Raises:
        ConfigError: the controller is ``off`` (nothing to save).
    """
    ctrl = session.live.active()
    if ctrl is None:
        raise ConfigError(
            "nothing to save: the controller is off", fix="select fixed, PID or RL first"
        )
    meta: dict[str, Any] = {
        "env_id": session.task.env.env_id,
        "concept": session.task.concept.name,
        "units": session.task.concept.units,
        "knob": session.task.knob,
        "setpoint": session.setpoint,
    }
    return controllers.save(ctrl, session.config.out_dir / name, meta=meta)


def load(session: GainsSession, name: str) -> None:
    """Load ``name`` from the output folder and make it the live controller (bumpless).

    The file is validated completely (``controllers.load``) before anything changes; a
    setpoint stored under ``meta`` is restored when it is within the task's range.

    Args:
        session: The tuning session.
        name: A validated file name in the output folder.

    Raises:
        ConfigError: no such file, or the file is not a controller that can be tuned here.
    """
    path = session.config.out_dir / name
    if not path.is_file():
        raise ConfigError(
            f"no gains file {name!r} in {str(session.config.out_dir)!r}; files: {list_files(session)}",
            fix="save gains first or pick a listed file",
        )
    load_path(session, path)


def load_path(session: GainsSession, path: Path) -> None:
    """Load the controller YAML at ``path`` into the session (see :func:`load`).

    Args:
        session: The tuning session.
        path: A controller YAML anywhere (the CLI's ``--gains``).

    Raises:
        ConfigError: the file is invalid or its controller type cannot be tuned here.
    """
    name = path.name
    ctrl = controllers.load(path)  # full validation; raises ConfigError naming the problem
    ctype = getattr(ctrl, "type_name", None)
    if ctype not in ("fixed", "pid", "rl"):
        raise ConfigError(f"{name}: controller type {ctype!r} cannot be tuned here")
    params: dict[str, Any] = (
        {"path": str(path)} if ctype == "rl" else dict(ctrl.to_config())  # type: ignore[attr-defined]
    )
    live = session.live
    if ctype == "rl":
        live.set_mode("rl", params)
    else:
        live.set_params(ctype, params)
        if live.mode != ctype:
            live.set_mode(ctype)
    setpoint = controllers.read_meta(path).get("setpoint")
    lo, hi = session.task.setpoint_range
    if isinstance(setpoint, int | float) and lo <= float(setpoint) <= hi:
        session.setpoint = float(setpoint)
