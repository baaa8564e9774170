"""Save and load the session's controller as the YAML that ``embodied eval``/``deploy`` read.

Files live in the session's output folder only (the page sends a bare file name, never a
path); writes are atomic (``controllers.save`` writes through :func:`embodied.io.write_text`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from embodied.errors import ConfigError

if TYPE_CHECKING:
    from embodied.apps.tune.session import TuneSession


def list_files(session: TuneSession) -> list[str]:
    """Gains files in the output folder, newest first."""
    folder = session.config.out_dir
    if not folder.is_dir():
        return []
    files = [p for p in folder.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file()]
    return [p.name for p in sorted(files, key=lambda p: p.stat().st_mtime, reverse=True)]


def save(session: TuneSession, name: str) -> Path:
    """Write the active controller (type, parameters, and context under ``meta``) to ``name``.

    Raises:
        ConfigError: the controller is ``off`` (nothing to save).
    """
    import controllers

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


def load(session: TuneSession, name: str) -> None:
    """Load ``name`` from the output folder and make it the live controller (bumpless).

    The file is validated completely (``controllers.load``) before anything changes; a
    setpoint stored under ``meta`` is restored when it is within the task's range.
    """
    path = session.config.out_dir / name
    if not path.is_file():
        raise ConfigError(
            f"no gains file {name!r} in {str(session.config.out_dir)!r}; files: {list_files(session)}",
            fix="save gains first or pick a listed file",
        )
    load_path(session, path)


def load_path(session: TuneSession, path: Path) -> None:
    """Load the controller YAML at ``path`` into the session (see :func:`load`)."""
    import controllers

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
