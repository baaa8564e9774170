"""Interactive controller tuning: ``embodied tune`` serves a live page for a running rollout.

* :class:`TuneSession` runs :func:`embodied.loop.rollout` in a background thread, streaming
  telemetry through a callback and applying validated commands between control steps; its
  states (:class:`~embodied.apps.tune.session.SessionState`) change only as its transition
  table allows.
* :class:`TuneTask` (:mod:`embodied.apps.tune.task`): the env, policy, concept and knob tuned.
* :func:`create_app` / :class:`TuneServer`: the Starlette app (page, JSON, WebSocket).
* :mod:`embodied.apps.tune.experiments`: the step-response experiment and PID auto-tuning.
"""

from __future__ import annotations

from embodied.apps.tune.configuration_tune import ServerConfig, TuneConfig
from embodied.apps.tune.session import TuneSession
from embodied.apps.tune.task import TuneTask

__all__ = ["ServerConfig", "TuneConfig", "TuneSession", "TuneTask"]
