"""Policies: scripted experts, parameterized diffusion policies, OpenVLA.

``policies.load(spec, env=...)`` takes a registered name (``expert``, ``random``) or a
checkpoint folder (``config.json`` with a ``policy_type`` field, weights in safetensors).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from embodied.contracts import Env, Policy
from embodied.errors import CheckpointError
from embodied.registry import Registry

POLICIES: Registry[Policy] = Registry(
    "policy",
    plugins=(
        "policies.scripted",
        "policies.diffusion",
        "policies.openvla",
        "hardware.bringup",
        "controllers.steerable_expert",
    ),
)
"""Name -> factory(env: Env | None, **kwargs) -> Policy."""

CHECKPOINT_LOADERS: Registry[Policy] = Registry(
    "checkpoint policy_type", plugins=("policies.diffusion", "policies.openvla")
)
"""``policy_type`` of a checkpoint's config.json -> loader(path, **kwargs) -> Policy."""


def load(spec: str | os.PathLike[str], env: Env | None = None, **kwargs: Any) -> Policy:
    """Build a policy from a registered name or load it from a checkpoint folder.

    Args:
        spec: A name from :data:`POLICIES` or a folder holding ``config.json``.
        env: The env the policy will run on (needed by scripted experts).
        **kwargs: Passed to the factory or loader (e.g. ``device``).
    """
    path = Path(spec)
    if path.is_dir():
        cfg = path / "config.json"
        if not cfg.exists():
            raise CheckpointError(
                f"checkpoint folder {str(path)!r} has no config.json",
                fix="pass a folder written by save_pretrained / `embodied train`",
            )
        policy_type = json.loads(cfg.read_text()).get("policy_type")
        if policy_type is None:
            raise CheckpointError(f"{cfg} has no 'policy_type' field")
        return CHECKPOINT_LOADERS.make(policy_type, path=path, **kwargs)
    return POLICIES.make(str(spec), env=env, **kwargs)
