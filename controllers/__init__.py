"""Closed-loop controllers that set a policy knob from a measured concept signal.

``controllers.make(name, **params)`` builds a registered controller (``fixed``, ``pid``,
``rl``); ``controllers.load(path)`` reads a YAML file with a ``type`` key and its parameters.
"""

from __future__ import annotations

from typing import Any

from embodied.contracts import Controller
from embodied.registry import Registry

CONTROLLERS: Registry[Controller] = Registry(
    "controller", plugins=("controllers.fixed", "controllers.pid", "controllers.rl")
)


def make(name: str, **params: Any) -> Controller:
    """Build controller ``name`` with ``params``."""
    return CONTROLLERS.make(name, **params)
