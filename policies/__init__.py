"""Policies: scripted experts, parameterized diffusion policies, OpenVLA.

``policies.load(spec, env=...)`` takes a registered name (``expert``, ``random``) or a
checkpoint folder (``config.json`` with a ``policy_type`` field, weights in safetensors).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from embodied.contracts import Env, Policy
from embodied.errors import CheckpointError, EmbodiedError
from embodied.io import read_folder_config
from embodied.registry import Registry

POLICIES: Registry[Policy] = Registry(
    "policy",
    plugins=(
        "policies.scripted",
        "policies.diffusion",
        "policies.openvla",
        "policies.bringup",
        "policies.steerable_expert",
    ),
)
"""Name -> factory(env: Env | None, **kwargs) -> Policy."""

CHECKPOINT_LOADERS: Registry[Policy] = Registry(
    "checkpoint policy_type", plugins=("policies.diffusion", "policies.openvla")
)
"""``policy_type`` of a checkpoint's config.json -> loader(path, env=env, **kwargs) -> Policy
(``env``: the env it will run on, or None; a loader may set the policy up for it)."""


def load(spec: str | os.PathLike[str], env: Env | None = None, **kwargs: Any) -> Policy:
    """Build a policy from a registered name or load it from a checkpoint folder.

    A folder's ``config.json`` names its loader in ``policy_type``; a released OpenVLA /
    Prismatic ``config.json`` (``model_type`` ``openvla``/``prismatic``, no ``policy_type``)
    goes to the ``openvla`` loader, which reads released configs.

    Args:
        spec: A name from :data:`POLICIES`, a folder holding ``config.json``, or a policy
            server's address ``ws://host:port`` (:class:`policies.remote.RemotePolicy`).
        env: The env the policy will run on (needed by scripted experts).
        **kwargs: Passed to the factory or loader (e.g. ``device``).

    Raises:
        CheckpointError: the folder's ``config.json`` is missing, malformed or names no loader.
    """
    if isinstance(spec, str) and spec.startswith(("ws://", "wss://")):
        return _remote(spec, kwargs)
    path = Path(spec)
    if path.is_dir():
        cfg = path / "config.json"
        raw = read_folder_config(
            path,
            what="checkpoint",
            fix="re-save the checkpoint with save_pretrained / `embodied train`",
            missing_fix="pass a folder written by save_pretrained / `embodied train`",
        )
        policy_type = raw.get("policy_type")
        if policy_type is None and raw.get("model_type") in ("openvla", "prismatic"):
            policy_type = "openvla"
        if not isinstance(policy_type, str):
            raise CheckpointError(
                f"{str(cfg)!r} has no string 'policy_type' field (got {policy_type!r}; "
                f"keys: {sorted(raw)[:12]})",
                fix=f'add "policy_type": one of {CHECKPOINT_LOADERS.names()} to it, or '
                "pass a folder written by save_pretrained / `embodied train`",
            )
        if policy_type not in CHECKPOINT_LOADERS:
            raise CheckpointError(
                f"{str(cfg)!r} names policy_type {policy_type!r}, which no loader reads; known: "
                f"{', '.join(CHECKPOINT_LOADERS.names())}",
                fix="restore config.json, or pass a folder written by `embodied train`",
            )
        try:
            return CHECKPOINT_LOADERS.make(policy_type, path=path, env=env, **kwargs)
        except EmbodiedError as exc:  # name the checkpoint: one key alone does not say which
            raise exc.in_file(path, "checkpoint") from None
    if str(spec) not in POLICIES and (path.exists() or os.sep in str(spec) or "/" in str(spec)):
        what = "is a file, not a checkpoint folder" if path.exists() else "does not exist"
        raise CheckpointError(
            f"policy {str(spec)!r} {what}",
            fix="pass a checkpoint folder (config.json + weights, as `embodied train` writes "
            f"it) or a policy name: {', '.join(POLICIES.names())}",
        )
    return POLICIES.make(str(spec), env=env, **kwargs)


def _remote(url: str, kwargs: dict[str, Any]) -> Policy:
    """A :class:`~policies.remote.RemotePolicy`; options meant for local policies are refused."""
    import inspect

    from embodied.errors import ConfigError
    from policies.remote import RemotePolicy

    accepted = set(inspect.signature(RemotePolicy).parameters) - {"url"}
    given = {k: v for k, v in kwargs.items() if v is not None and k != "env"}
    unknown = sorted(set(given) - accepted)
    if unknown:
        raise ConfigError(
            f"a remote policy ({url}) takes no options {unknown}; the server's policy was "
            "configured when it was served",
            fix=f"pass them to `embodied serve` instead; remote options: {sorted(accepted)}",
        )
    return RemotePolicy(url, **given)
