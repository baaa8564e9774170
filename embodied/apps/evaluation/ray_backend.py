"""The ``ray`` evaluation backend: grid episodes on Ray actors, one simulator per actor.

``embodied eval ... --backend ray [--address auto|HOST:PORT]`` (or ``EvalConfig(backend="ray")``)
runs the same :class:`~embodied.apps.evaluation.worker.EpisodeRunner` as the ``local`` backend,
but inside Ray actors (one process each, ``num_cpus=1``), so the grid can spread over every
node of a Ray cluster. Scheduling is Ray's; this module only keeps one episode in flight per
actor (so it knows which episode a dead actor held) and merges the records.

Fault tolerance: when an actor process dies (node lost, OOM kill, ``kill -9``), the episode it
held raises :class:`ray.exceptions.RayActorError`; that episode goes back to the front of the
queue and a fresh actor replaces the dead one. Records are keyed by grid index and written
once, so an episode is never counted twice or lost; after ``max_retries`` reruns it is
recorded as failed (``EpisodeRecord.error``). Episodes are deterministic given their spec
(seed, init state), so the merged results equal a serial run's. An episode that raises is
not rerun: the actor returns it as a failed record
(:meth:`~embodied.apps.evaluation.worker.EpisodeRunner.attempt`), as the other backends do.

Ray is imported lazily: the default ``local`` backend never needs it. Without an address a
private local Ray instance is started and shut down afterwards (no dashboard, node IP
127.0.0.1 requested). Ray (2.60) still resolves that to the host's address and its GCS and
raylet gRPC servers listen on all interfaces (Ray has no loopback-only switch), so the private
instance always runs with Ray's token authentication: ``RAY_AUTH_MODE=token`` (overriding a
``disabled`` inherited from the shell) and, unless ``RAY_AUTH_TOKEN`` / ``RAY_AUTH_TOKEN_PATH``
name one, a fresh random token held only in this process's environment (inherited by Ray's
processes, never written to ``~/.ray``). Every RPC to the GCS or raylet without that token is
refused (``UNAUTHENTICATED``); both variables are restored when the instance shuts down. A Ray
without token authentication (before 2.52) is refused with a :class:`ConfigError`.

``address="auto"`` or ``"HOST:PORT"`` (``--address``, or ``EMBODIED_RAY_ADDRESS`` /
``RAY_ADDRESS``) joins an existing cluster with that cluster's own authentication (start it
with ``RAY_AUTH_MODE=token ray start --head --node-ip-address 127.0.0.1``). A Ray session
already initialised in this process (tests, notebooks) is used as is.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import secrets
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from embodied.apps.evaluation.backends import (
    BACKENDS,
    EvaluationError,
    EventCallback,
    emit,
    finished,
    next_spec,
)
from embodied.apps.evaluation.configuration_evaluation import EpisodeSpec
from embodied.apps.evaluation.worker import EpisodeRecord, EpisodeRunner
from embodied.config import checked, validate
from embodied.errors import ConfigError, EmbodiedError
from embodied.threads import single_thread

WORKER_ENV_VARS = ("MUJOCO_GL", "PYOPENGL_PLATFORM", "EMBODIED_LIBERO_ASSETS", "LIBERO_CONFIG_PATH")
"""Variables of this process passed on to the actors (rendering backend, asset folders)."""

AUTH_ENV_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")
"""Variables :func:`enable_token_auth` sets for a private instance (restored afterwards)."""
MIN_RAY_TOKEN_AUTH = "2.52"


def import_ray() -> Any:
    """Import Ray, or explain how to install it.

    Raises:
        ConfigError: Ray is not installed.
    """
    try:
        import ray  # optional dist extra
    except ImportError as exc:
        raise ConfigError(
            f"backend 'ray' needs the ray package, which is not importable ({exc})",
            fix=f"pip install 'ray>={MIN_RAY_TOKEN_AUTH}' (or use --backend local)",
        ) from exc
    return ray


TOKEN_AUTH_API = (
    "AuthenticationMode",
    "AuthenticationTokenLoader",
    "Config",
    "get_authentication_mode",
)
"""What :mod:`ray._raylet` offers from Ray 2.52 on to switch and check token authentication."""


def _raylet() -> Any:
    """Ray's core module (typed ``Any``: its stub lacks the authentication API)."""
    return importlib.import_module("ray._raylet")


def _refresh_auth_config() -> None:
    """Make this process's Ray re-read the authentication variables (mode, token)."""
    raylet = _raylet()
    # the config first: a core-worker thread still draining must not reload the token under
    # a stale mode (Ray's own test helpers reset in this order)
    raylet.Config.initialize("")
    raylet.AuthenticationTokenLoader.instance().reset_cache()


def enable_token_auth(ray: Any) -> dict[str, str | None]:
    """Turn on Ray's token authentication for a private instance started next in this process.

    Sets ``RAY_AUTH_MODE=token`` and, unless the environment already names a token
    (``RAY_AUTH_TOKEN`` / ``RAY_AUTH_TOKEN_PATH``), a fresh random ``RAY_AUTH_TOKEN``.

    Returns:
        The previous values of :data:`AUTH_ENV_VARS`, for :func:`restore_auth_env`.

    Raises:
        ConfigError: This Ray has no token authentication.
    """
    if not all(hasattr(_raylet(), name) for name in TOKEN_AUTH_API):
        raise ConfigError(
            f"ray {getattr(ray, '__version__', '?')} has no token authentication, and a local "
            "Ray instance listens on every network interface",
            fix=f"pip install 'ray>={MIN_RAY_TOKEN_AUTH}' (or use --backend local)",
        )
    saved = {k: os.environ.get(k) for k in AUTH_ENV_VARS}
    os.environ["RAY_AUTH_MODE"] = "token"
    if not os.environ.get("RAY_AUTH_TOKEN") and not os.environ.get("RAY_AUTH_TOKEN_PATH"):
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    _refresh_auth_config()
    return saved


def restore_auth_env(saved: dict[str, str | None]) -> None:
    """Undo :func:`enable_token_auth` (after ``ray.shutdown()``)."""
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    _refresh_auth_config()


def token_auth_enabled() -> bool:
    """Whether this process's Ray is in token authentication mode."""
    raylet = _raylet()
    return bool(raylet.get_authentication_mode() == raylet.AuthenticationMode.TOKEN)


class EpisodeActor:
    """The Ray actor body: one :class:`EpisodeRunner` (and so one simulator) per process."""

    def __init__(self, runner: EpisodeRunner) -> None:
        single_thread()
        self.runner = runner

    def pid(self) -> int:
        """Process id of this actor (for progress messages and fault-injection tests)."""
        return os.getpid()

    def run(self, spec: EpisodeSpec) -> EpisodeRecord:
        """Run one grid episode (an exception in it comes back as the record's ``error``)."""
        return self.runner.attempt(spec)

    def close(self) -> None:
        """Close the cached env."""
        self.runner.close()


@dataclass
class _Slot:
    """One actor and the episode it holds."""

    handle: Any
    pid: int = 0
    current: EpisodeSpec | None = None
    last_env: str = ""
    ref: Any = None


@dataclass
class RayBackend:
    """Runs grid episodes on Ray actors with rerun-on-death.

    Args:
        workers: Actors (each one process with one single-threaded simulator, 1 CPU).
        max_retries: Reruns of an episode whose actor died, before it is recorded as failed.
        start_method: Ignored (Ray starts its own worker processes); accepted so every
            backend takes the same arguments.
        address: Cluster to join (``auto``, ``HOST:PORT``, ``ray://HOST:PORT``); None starts
            a private local instance with token authentication (or uses ``RAY_ADDRESS`` /
            an initialised session).
        poll_s: Longest wait for a finished episode before checking again (s).
        num_cpus: CPUs of a private local instance (default: ``max(workers, os.cpu_count())``).
    """

    config_name: ClassVar[str] = "ray backend"

    workers: int = checked(1, ge=1, fix="use workers >= 1")
    max_retries: int = checked(2, ge=0, fix="use e.g. 2 (0: never rerun)")
    start_method: str = "spawn"
    address: str | None = None
    poll_s: float = 0.5
    num_cpus: int | None = None
    _attempts: dict[int, int] = field(default_factory=dict, repr=False)
    _external: bool = field(default=False, repr=False)
    _saved_auth_env: dict[str, str | None] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        validate(self)
        if self.address is None:
            self.address = os.environ.get("EMBODIED_RAY_ADDRESS") or None

    # ---- connection --------------------------------------------------------------------
    def connect(self) -> bool:
        """Initialise Ray unless already initialised; return True when this call started it.

        A private instance (no address) runs with token authentication (see the module
        docstring); call :meth:`shutdown` when this returned True.

        Raises:
            ConfigError: Ray cannot be reached or started, or has no token authentication.
        """
        ray = import_ray()
        if ray.is_initialized():
            return False
        kwargs: dict[str, Any] = {
            "include_dashboard": False,
            "logging_level": "WARNING",
            "log_to_driver": False,
        }
        if self.address or os.environ.get("RAY_ADDRESS"):
            kwargs["address"] = self.address or os.environ["RAY_ADDRESS"]
            kwargs.pop("include_dashboard")
            self._external = True
        else:
            kwargs["num_cpus"] = self.num_cpus or max(self.workers, os.cpu_count() or 1)
            kwargs["_node_ip_address"] = "127.0.0.1"
            self._saved_auth_env = enable_token_auth(ray)
        try:
            ray.init(**kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            self._restore_auth()
            raise ConfigError(
                f"could not connect to Ray at {kwargs.get('address', 'a new local instance')!r}: "
                f"{exc}",
                fix="start a cluster with `RAY_AUTH_MODE=token ray start --head "
                "--node-ip-address 127.0.0.1` and pass --address auto, or omit --address to "
                "start a private local instance",
            ) from exc
        except BaseException:
            self._restore_auth()
            raise
        if self._saved_auth_env is not None and not token_auth_enabled():
            self.shutdown()  # never leave an unauthenticated instance listening
            raise ConfigError(
                f"ray {ray.__version__} started its local instance without token authentication",
                fix=f"pip install 'ray>={MIN_RAY_TOKEN_AUTH}' (or use --backend local)",
            )
        return True

    def shutdown(self) -> None:
        """Shut down the Ray instance :meth:`connect` started and restore the environment."""
        import_ray().shutdown()
        self._restore_auth()

    def _restore_auth(self) -> None:
        if self._saved_auth_env is not None:
            saved, self._saved_auth_env = self._saved_auth_env, None
            restore_auth_env(saved)

    # ---- execution ---------------------------------------------------------------------
    def run(
        self,
        specs: Sequence[EpisodeSpec],
        runner: EpisodeRunner,
        on_event: EventCallback | None = None,
    ) -> dict[int, EpisodeRecord]:
        """Run every spec on Ray actors; rerun the episodes of actors that die."""
        ray = import_ray()
        started = self.connect()
        try:
            return self._run(ray, specs, runner, on_event)
        finally:
            if started:
                self.shutdown()

    def _actor_class(self, ray: Any) -> Any:
        options: dict[str, Any] = {"num_cpus": 1, "max_restarts": 0, "max_task_retries": 0}
        if self._external:  # workers of a `ray start` cluster do not inherit our environment
            env_vars = {k: os.environ[k] for k in WORKER_ENV_VARS if k in os.environ}
            options["runtime_env"] = {"env_vars": env_vars}
        return ray.remote(EpisodeActor).options(**options)

    def _spawn(self, actor_cls: Any, runner_ref: Any, n: int) -> list[_Slot]:
        import ray  # optional dist extra

        slots = [_Slot(actor_cls.remote(runner_ref)) for _ in range(n)]
        pids = ray.get([s.handle.pid.remote() for s in slots])
        for s, pid in zip(slots, pids, strict=True):
            s.pid = int(pid)
        return slots

    def _run(
        self,
        ray: Any,
        specs: Sequence[EpisodeSpec],
        runner: EpisodeRunner,
        on_event: EventCallback | None,
    ) -> dict[int, EpisodeRecord]:
        from ray.exceptions import RayError, RayTaskError  # optional dist extra

        pending: deque[EpisodeSpec] = deque(specs)
        results: dict[int, EpisodeRecord] = {}
        attempts = self._attempts = {s.index: 0 for s in specs}
        if not specs:
            return results
        actor_cls = self._actor_class(ray)
        runner_ref = ray.put(runner)
        slots = self._spawn(actor_cls, runner_ref, min(self.workers, len(specs)))
        in_flight: dict[Any, _Slot] = {}
        try:
            while pending or in_flight:
                for slot in slots:
                    if slot.current is None and pending:
                        spec = next_spec(pending, slot.last_env)
                        attempts[spec.index] += 1
                        slot.current, slot.last_env = spec, spec.env_id
                        slot.ref = slot.handle.run.remote(spec)
                        in_flight[slot.ref] = slot
                        emit(on_event, "start", spec=spec, pid=slot.pid)
                ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=self.poll_s)
                for ref in ready:
                    slot = in_flight.pop(ref)
                    held = slot.current
                    assert held is not None
                    spec = held
                    try:
                        record: EpisodeRecord = ray.get(ref)
                    except RayTaskError as exc:  # an error that stops the evaluation
                        cause = getattr(exc, "cause", None)
                        if isinstance(cause, EmbodiedError):
                            raise cause from None  # same for every episode: stop now
                        raise EvaluationError(
                            f"episode {spec.index} failed in Ray actor {slot.pid}:\n{exc}"
                        ) from None
                    except RayError as exc:  # actor/worker/node died, OOM kill, object lost
                        self._died(ray, slot, spec, exc, pending, results, on_event)
                        slot.handle = None
                        (fresh,) = self._spawn(actor_cls, runner_ref, 1)
                        slots[slots.index(slot)] = fresh
                        continue
                    slot.current = None
                    if spec.index in results:  # cannot happen: one attempt in flight per spec
                        continue
                    record.attempts = attempts[spec.index]
                    results[spec.index] = record
                    finished(on_event, record)
        finally:
            self._shutdown(ray, slots)
        return results

    def _died(
        self,
        ray: Any,
        slot: _Slot,
        spec: EpisodeSpec,
        exc: Exception,
        pending: deque[EpisodeSpec],
        results: dict[int, EpisodeRecord],
        on_event: EventCallback | None,
    ) -> None:
        """Book-keeping for an actor that died holding ``spec``: requeue or mark failed."""
        n = self._attempts[spec.index]
        emit(on_event, "worker_died", pid=slot.pid, exitcode=None, spec=spec, attempts=n)
        with contextlib.suppress(Exception):  # already gone
            ray.kill(slot.handle, no_restart=True)
        if n > self.max_retries:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            results[spec.index] = EpisodeRecord(
                spec=spec, attempts=n, error=f"Ray actor died {n} times (last: {first})"
            )
            finished(on_event, results[spec.index])
        else:
            pending.appendleft(spec)

    @staticmethod
    def _shutdown(ray: Any, slots: list[_Slot]) -> None:
        live = [s for s in slots if s.handle is not None]
        with contextlib.suppress(Exception):  # an actor already died: nothing to close there
            ray.wait([s.handle.close.remote() for s in live], num_returns=len(live), timeout=10.0)
        for s in live:
            with contextlib.suppress(Exception):
                ray.kill(s.handle, no_restart=True)


BACKENDS.register("ray", RayBackend, help="Ray actors on this machine or a Ray cluster")
