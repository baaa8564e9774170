"""Serve a policy over the network (openpi's websocket protocol).

Any policy the CLI loads (a name or a checkpoint folder) answers observations with action
chunks: openpi's client (openpi_client.websocket_client_policy) and its LIBERO evaluation
call it as they call an openpi server, and every command of ours takes it as
--policy ws://HOST:PORT. Binds 127.0.0.1 unless --host says otherwise, which needs --api-key
(or --insecure). GET /healthz answers 200.
"""

from __future__ import annotations

from typing import Any

import typer

from embodied.apps.cli._common import parse_kv
from embodied.apps.cli._config_options import Opt, config_options
from embodied.apps.serve import PolicyServer, ServeConfig, serve


def register(app: typer.Typer) -> None:
    """Add the ``serve`` command to ``app``."""

    @app.command("serve", help=__doc__)
    @config_options(
        ServeConfig,
        Opt("policy", default=...),
        "env",
        "host",
        "port",
        "api_key",
        Opt("insecure", negatable=False),
        "max_message_mb",
    )
    def serve_cmd(
        policy_arg: list[str] = typer.Option(
            [], "--policy-arg", help="Policy option key=value (repeatable)."
        ),
        env_arg: list[str] = typer.Option(
            [], "--env-arg", help="Env option key=value (repeatable)."
        ),
        *,
        config: dict[str, Any],
    ) -> None:
        cfg = ServeConfig(
            **config,
            policy_kwargs=parse_kv(policy_arg, "--policy-arg", "device=cpu"),
            env_kwargs=parse_kv(env_arg, "--env-arg", "image_size=84"),
        )

        def ready(server: PolicyServer) -> None:
            host = server.host if ":" not in server.host else f"[{server.host}]"
            print(
                f"serving {server.metadata['policy']} ({cfg.policy}) on {server.url} "
                f"(health: http://{host}:{server.port}/healthz); Ctrl-C stops",
                flush=True,
            )

        serve(cfg, on_ready=ready)
