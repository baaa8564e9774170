"""Interactive controller tuning: ``embodied tune`` serves a live page for a running rollout.

* :class:`TuneSession` runs :func:`embodied.loop.rollout` in a background thread, streaming
  telemetry through a callback and applying validated commands between control steps.
* :func:`create_app` / :class:`TuneServer`: the Starlette app (page, JSON, WebSocket).
* :mod:`embodied.apps.tune.experiments`: the step-response experiment and PID auto-tuning.
"""

from __future__ import annotations

from embodied.apps.tune.configuration_tune import ServerConfig, TuneConfig
from embodied.apps.tune.session import TuneSession, TuneTask

__all__ = ["ServerConfig", "TuneConfig", "TuneSession", "TuneTask"]
