"""A policy server for ``embodied bench serve``, run in its own process.

``python -m embodied.apps.bench._serve_target ours|openpi PORT``: serves
:class:`ConstantChunk` with ``embodied serve``'s server or upstream openpi's
``WebsocketPolicyServer`` (``../shared/openpi/src`` on ``PYTHONPATH``), on 127.0.0.1.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from embodied.contracts import Policy

CHUNK = (50, 7)
"""Rows x action size of the answered chunk (openpi's pi0 LIBERO chunk length)."""


class ConstantChunk(Policy):
    """A policy that costs nothing: the measured time is the transport's."""

    action_dim = CHUNK[1]
    n_action_steps = 5

    def __init__(self) -> None:
        super().__init__()
        self._chunk = np.zeros(CHUNK, dtype=np.float64)

    def adapt_observation(self, raw: Any) -> dict[str, Any]:
        return dict(raw)  # the bench sends openpi's LIBERO keys; nothing to convert

    def predict_action_chunk(self, obs: dict[str, Any]) -> np.ndarray:
        return self._chunk


def main(kind: str, port: int) -> None:
    """Serve until killed."""
    policy = ConstantChunk()
    if kind == "ours":
        from embodied.apps.serve import PolicyServer, server_metadata

        PolicyServer(policy, server_metadata(policy), port=port).serve_forever()
        return
    from openpi.serving.websocket_policy_server import WebsocketPolicyServer

    class Infer:  # openpi_client.base_policy.BasePolicy
        def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
            return {"actions": policy.fresh_chunk(obs)}

    WebsocketPolicyServer(Infer(), host="127.0.0.1", port=port, metadata={}).serve_forever()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
