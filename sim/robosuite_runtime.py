"""Process-level care for robosuite-based envs (robosuite and LIBERO): quiet import, clean exit.

Two things a user would otherwise see on every command that touches these envs:

* robosuite 1.4 prints three "No private macro file found!" warnings on import unless
  ``robosuite.macros_private`` exists. The defaults in ``robosuite.macros`` are what we want,
  so an empty private macro module is provided before the first import.
* robosuite registers ``eglTerminate`` with :mod:`atexit` when it creates its first EGL
  context. A render context still alive at interpreter shutdown is then freed by its
  ``__del__`` after the display is gone, which prints ``Exception ignored in ...
  MjRenderContext.__del__ ... EGLError`` tracebacks. :func:`close_at_exit` closes live envs
  before that handler runs.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import types
import weakref
from typing import Protocol


class _Closable(Protocol):
    def close(self) -> None: ...


def quiet_robosuite_import() -> None:
    """Provide an empty ``robosuite.macros_private`` (silences robosuite's import warnings).

    Call before the first ``import robosuite`` (LIBERO imports it too). Also defaults
    ``MUJOCO_GL`` to ``egl`` for headless rendering.
    """
    sys.modules.setdefault("robosuite.macros_private", types.ModuleType("robosuite.macros_private"))
    os.environ.setdefault("MUJOCO_GL", "egl")


def _close_if_alive(ref: weakref.ReferenceType[_Closable]) -> None:
    env = ref()
    # shutting down: a failed close must not mask the real exit status
    if env is not None:
        with contextlib.suppress(Exception):
            env.close()


def close_at_exit(env: _Closable) -> None:
    """Close ``env`` at interpreter exit, before robosuite terminates the EGL display.

    :mod:`atexit` runs handlers last-in first-out, so this must be called after the env's
    first render context exists (i.e. after constructing the raw robosuite env): the handler
    then runs before robosuite's ``eglTerminate``. Only a weak reference is kept, so an env
    that is garbage-collected earlier is not kept alive.
    """
    atexit.register(_close_if_alive, weakref.ref(env))
