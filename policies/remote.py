"""A policy served over the network: ``--policy ws://host:port`` in every command.

:class:`RemotePolicy` is a :class:`~embodied.contracts.Policy` whose chunks come from a policy
server speaking openpi's websocket protocol (:mod:`embodied.wire`): ``embodied serve``, or
upstream openpi's ``WebsocketPolicyServer``. It reads the server's metadata on connect and
checks compatibility from it before the first step (action size, cameras, image size,
conventions); knobs the server declares are knobs of this policy (sent with every request);
the safety filter stays in the caller's loop, on the robot's side.

Failures name the server and the fix: a server that is not there, one that does not answer
within ``timeout_s``, a connection lost mid-episode (re-established up to ``reconnects`` times
before the error; a reconnect starts the server's episode state afresh, which the error says).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from embodied.contracts import Env, Knob, KnobMixin, Policy
from embodied.errors import CompatibilityError, ConfigError, EmbodiedError
from embodied.specs import Observation
from embodied.wire import KNOBS_KEY, OP_KEY, SEED_KEY, packb, unpackb

SCHEMES = ("ws://", "wss://")
"""Policy specs starting with one of these load a :class:`RemotePolicy`."""


class RemotePolicyError(EmbodiedError, ConnectionError):
    """The policy server cannot be reached, did not answer in time, or answered an error."""


def is_remote(spec: object) -> bool:
    """Whether the policy spec names a server (``ws://host:port``)."""
    return isinstance(spec, str) and spec.startswith(SCHEMES)


class RemotePolicy(KnobMixin, Policy):
    """A policy whose chunks a server computes.

    Args:
        url: ``ws://host:port`` (``wss://`` for TLS).
        api_key: Sent as ``Authorization: Api-Key <key>``, as openpi's client sends it.
        timeout_s: Longest wait for the connection and for each answer (s).
        reconnects: Connection losses re-established per episode before giving up.
        n_action_steps: Rows of each chunk executed before asking again (default: the
            server's ``n_action_steps``, else the whole chunk).
        connect: Connect now (False: on first use).
    """

    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        reconnects: int = 3,
        n_action_steps: int | None = None,
        connect: bool = True,
    ) -> None:
        super().__init__()
        if not is_remote(url):
            raise ConfigError(
                f"remote policy url {url!r} does not start with ws:// or wss://",
                fix="pass --policy ws://HOST:PORT (the address `embodied serve` prints)",
            )
        parts = urlsplit(url)
        if not parts.hostname or parts.port is None:
            raise ConfigError(
                f"remote policy url {url!r} needs a host and a port",
                fix="pass --policy ws://HOST:PORT, e.g. ws://127.0.0.1:8000",
            )
        if not timeout_s > 0:
            raise ConfigError(f"timeout_s={timeout_s}: must be > 0", fix="pass e.g. 30")
        self.url = url
        self.host, self.port = parts.hostname, int(parts.port)
        self.api_key = api_key
        self.timeout_s = float(timeout_s)
        self.reconnects = int(reconnects)
        self._requested_steps = n_action_steps
        self._ws: Any = None
        self.metadata: dict[str, Any] = {}
        self._knobs: dict[str, Knob] = {}
        self._episode_seed: int | None = None
        self.action_dim = 0
        self.server_timing: dict[str, float] = {}
        """The last answer's ``server_timing`` (ms)."""
        if connect:
            self._connect()

    @property  # type: ignore[override]
    def n_action_steps(self) -> int:
        """Rows of each chunk executed before asking again: the one asked for (the
        ``n_action_steps`` option, or ``embodied eval --execute-steps``), else the server's,
        else the whole chunk. A property, so that a reconnect keeps what was asked for."""
        steps = self._requested_steps or self.metadata.get("n_action_steps")
        return int(steps) if steps else 10**9

    @n_action_steps.setter
    def n_action_steps(self, value: int) -> None:
        self._requested_steps = int(value)

    # ---- connection -------------------------------------------------------------------------
    def _where(self) -> str:
        return f"policy server {self.host}:{self.port}"

    def _connect(self) -> None:
        from websockets.exceptions import InvalidStatus, WebSocketException
        from websockets.sync.client import connect

        headers = {"Authorization": f"Api-Key {self.api_key}"} if self.api_key else None
        try:
            self._ws = connect(
                self.url,
                compression=None,
                max_size=None,
                additional_headers=headers,
                open_timeout=self.timeout_s,
            ).__enter__()  # a plain connection, without websockets 14+'s deprecation warning
            raw = self._ws.recv(timeout=self.timeout_s)
        except InvalidStatus as exc:
            status = exc.response.status_code
            fix = (
                "pass the server's key with --policy-arg api_key=KEY"
                if status in (401, 403)
                else "check the url points at `embodied serve` or an openpi server"
            )
            raise RemotePolicyError(
                f"{self._where()} refused the connection (HTTP {status})", fix
            ) from exc
        except (OSError, TimeoutError, WebSocketException) as exc:
            raise RemotePolicyError(
                f"cannot reach {self._where()} ({type(exc).__name__}: {exc})",
                fix=f"start it (`embodied serve --policy SPEC --port {self.port}`) or check the "
                "host, port and firewall",
            ) from exc
        self._set_metadata(unpackb(raw) if isinstance(raw, bytes) else {})

    def _set_metadata(self, meta: Any) -> None:
        if not isinstance(meta, Mapping):
            raise RemotePolicyError(f"{self._where()} sent metadata {meta!r:.80}, not a map")
        self.metadata = dict(meta)
        self.action_dim = int(self.metadata.get("action_dim", self.action_dim) or 0)
        self.image_keys = tuple(self.metadata.get("image_keys", ()))
        size = self.metadata.get("image_size")
        self.image_size = (int(size[0]), int(size[1])) if size else None
        self.image_orientation = self.metadata.get("image_orientation")
        self.gripper_convention = self.metadata.get("gripper_convention")
        self.history_steps = int(self.metadata.get("history_steps", 1))
        self._knobs = {
            name: Knob(
                name,
                tuple(k["low"]),
                tuple(k["high"]),
                tuple(k["default"]),
                str(k.get("units", "1")),
                str(k.get("description", "")),
            )
            for name, k in dict(self.metadata.get("knobs", {})).items()
        }

    def close(self) -> None:
        """Close the connection."""
        if self._ws is not None:
            self._ws.close()
            self._ws = None

    def _request(self, message: dict[str, Any], answer: bool = True) -> Any:
        """Send ``message`` and (``answer``) return the decoded reply, reconnecting on loss."""
        from websockets.exceptions import ConnectionClosed

        lost: BaseException | None = None
        for attempt in range(self.reconnects + 1):
            if attempt:
                time.sleep(min(0.1 * 2 ** (attempt - 1), 2.0))
            try:
                if self._ws is None:
                    self._connect()
                    assert self._ws is not None
                    if lost is not None and self.metadata.get("embodied_protocol"):
                        # the server's episode state went with the connection: start afresh
                        self._ws.send(packb({OP_KEY: "reset", SEED_KEY: self._episode_seed}))
                        self._ws.recv(timeout=self.timeout_s)
                ws = self._ws
                assert ws is not None
                ws.send(packb(message))
                if not answer:
                    return None
                reply = ws.recv(timeout=self.timeout_s)
            except TimeoutError as exc:
                self.close()  # its late answer would be read as the next one's
                raise RemotePolicyError(
                    f"{self._where()} did not answer within {self.timeout_s:g} s",
                    fix="raise --policy-arg timeout_s=..., or serve on a faster machine",
                ) from exc
            except (ConnectionClosed, OSError, RemotePolicyError) as exc:
                if isinstance(exc, RemotePolicyError) and lost is None:
                    raise  # never connected: nothing to re-establish
                self._ws = None
                lost = exc
                continue
            if isinstance(reply, str):  # openpi's servers answer errors as text
                raise RemotePolicyError(
                    f"{self._where()} answered an error: {reply.strip()[-800:]}"
                )
            return unpackb(reply)
        raise RemotePolicyError(
            f"lost the connection to {self._where()} ({lost}) and {self.reconnects} reconnects "
            "failed",
            fix="check the server is running and reachable; after a reconnect the server starts "
            "the episode's state afresh",
        ) from lost

    # ---- Policy contract ---------------------------------------------------------------------
    def reset(self) -> None:
        """Clear the local queue and start an episode on the server."""
        super().reset()
        self._episode_seed = None
        if self.metadata.get("embodied_protocol"):
            self._request({OP_KEY: "reset", SEED_KEY: None})

    def seed_episode(self, seed: int) -> None:
        """Seed the server's episode (its sampling noise), as in process."""
        self._episode_seed = int(seed)
        if self.metadata.get("embodied_protocol"):
            self._request({OP_KEY: "reset", SEED_KEY: int(seed)})

    def _message(self, obs: Observation, op: str) -> dict[str, Any]:
        msg: dict[str, Any] = {k: v for k, v in obs.items()}
        if self.metadata.get("embodied_protocol"):
            msg[OP_KEY] = op
            if self._knobs:
                msg[KNOBS_KEY] = {n: self.get_knob(n) for n in self._knobs}
        return msg

    def observe(self, obs: Observation) -> None:
        """Send ``obs`` to the server's history (only for policies that keep one)."""
        if self.history_steps > 1:
            self._request(self._message(obs, "observe"), answer=False)

    def select_action(self, obs: Observation) -> np.ndarray:
        """Send every step's observation when the server's policy keeps a history."""
        if self._queue:
            self.observe(obs)
        return super().select_action(obs)

    def predict_action_chunk(self, obs: Observation) -> np.ndarray:
        """Ask the server for a chunk (n_steps, action_dim)."""
        reply = self._request(self._message(obs, "infer"))
        if not isinstance(reply, Mapping) or "actions" not in reply:
            raise RemotePolicyError(
                f"{self._where()} answered without 'actions' (keys: "
                f"{sorted(reply) if isinstance(reply, Mapping) else type(reply).__name__})"
            )
        self.server_timing = dict(reply.get("server_timing", {}))
        chunk = np.asarray(reply["actions"], dtype=np.float64)
        if chunk.ndim == 1:
            chunk = chunk[None]
        if not self.action_dim:
            self.action_dim = int(chunk.shape[-1])
        return chunk

    fresh_chunk = predict_action_chunk

    def check_compatible(self, env: Env) -> None:
        """The usual checks from the server's metadata, and its env's, when it names one."""
        if not self.action_dim:  # an upstream server that declares nothing: ask once
            raise CompatibilityError(
                f"{self._where()} declares no action_dim in its metadata, so compatibility "
                "cannot be checked before the first step",
                fix="serve the policy with `embodied serve`, or add 'action_dim' to the "
                "metadata of your server",
            )
        served = self.metadata.get("env")
        if isinstance(served, Mapping) and served.get("action") and "names" in served["action"]:
            theirs = tuple(served["action"]["names"])
            if theirs != tuple(env.action_spec.names):
                raise CompatibilityError(
                    f"{self._where()} serves a policy for env {served.get('env_id')!r} with "
                    f"actions {list(theirs)}, but env {env.env_id!r} takes "
                    f"{list(env.action_spec.names)}",
                    fix="serve the policy with --env matching this env, or run on that env",
                )
        super().check_compatible(env)

    def fork(self) -> Policy:
        """Not meaningful for a client (its server forks); refuse rather than share a socket."""
        raise ConfigError(
            "a remote policy cannot be forked (it holds one connection)",
            fix="open another RemotePolicy to the same server",
        )
