"""What each validated command does to the session (run by the loop thread only).

One handler per command name of :data:`embodied.apps.tune.commands.COMMANDS`; the session looks
them up in :data:`HANDLERS`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from embodied.apps.tune import experiments, gains_io
from embodied.apps.tune.session import TuneSession, format_value
from embodied.errors import ConfigError

Handler = Callable[["TuneSession", dict[str, Any]], None]


def _setpoint(s: TuneSession, a: dict[str, Any]) -> None:
    s.setpoint = a["value"]


def _gains(s: TuneSession, a: dict[str, Any]) -> None:
    s.live.set_params(a["type"], a["params"])


def _controller(s: TuneSession, a: dict[str, Any]) -> None:
    s.live.set_mode(a["type"], {"path": a["path"]} if a["type"] == "rl" else None)


def _pause(s: TuneSession, a: dict[str, Any]) -> None:
    s.paused = True


def _resume(s: TuneSession, a: dict[str, Any]) -> None:
    s.paused = False


def _step(s: TuneSession, a: dict[str, Any]) -> None:
    s.paused, s._step_once = True, True


def _reset(s: TuneSession, a: dict[str, Any]) -> None:
    s._stop_episode = True


def _new_seed(s: TuneSession, a: dict[str, Any]) -> None:
    s.seed = a["seed"] if a["seed"] is not None else random.randrange(2**31 - 1)
    s._stop_episode = True


def _step_test(s: TuneSession, a: dict[str, Any]) -> None:
    s.queue_job(lambda: experiments.step_test(s, a["from"], a["to"]))


def _autotune(s: TuneSession, a: dict[str, Any]) -> None:
    s.queue_job(lambda: experiments.autotune(s, a["from"], a["to"], a["budget"]))


def _apply_proposal(s: TuneSession, a: dict[str, Any]) -> None:
    if s.proposal is None:
        raise ConfigError("no auto-tune proposal yet", fix="run Auto-tune first")
    s.live.set_params("pid", s.proposal)
    s.emit("info", message="applied proposal " + format_value(s.proposal))


def _stop_job(s: TuneSession, a: dict[str, Any]) -> None:
    s._stop_episode = True


def _save(s: TuneSession, a: dict[str, Any]) -> None:
    path = gains_io.save(s, a["name"])
    s.emit("saved", message=f"saved {path.name}", files=gains_io.list_files(s))


def _load(s: TuneSession, a: dict[str, Any]) -> None:
    gains_io.load(s, a["name"])
    params = s.live.params.get(s.live.mode, {})
    s.emit("loaded", message=f"loaded {a['name']}: {s.live.mode} {format_value(params)}")


def _list(s: TuneSession, a: dict[str, Any]) -> None:
    s.emit("files", files=gains_io.list_files(s))


HANDLERS: dict[str, Handler] = {
    "setpoint": _setpoint,
    "gains": _gains,
    "controller": _controller,
    "pause": _pause,
    "resume": _resume,
    "step": _step,
    "reset": _reset,
    "new_seed": _new_seed,
    "step_test": _step_test,
    "autotune": _autotune,
    "apply_proposal": _apply_proposal,
    "stop_job": _stop_job,
    "save": _save,
    "load": _load,
    "list": _list,
}
"""Command name -> handler(session, args)."""
