"""Native OpenVLA (fused DINOv2 + SigLIP -> MLP projector -> Llama-2) and activation steering.

Registers policy ``openvla`` (``policies.load("openvla", env=env, path=..., unnorm_key=...)``)
and the checkpoint loader for ``config.json`` ``policy_type: openvla``. Heavy modules are
imported on use.
"""

from __future__ import annotations

from typing import Any

from embodied.contracts import Policy
from policies import CHECKPOINT_LOADERS, POLICIES


def _factory(env: Any = None, **kwargs: Any) -> Policy:
    """OpenVLA from a folder or hub id (path=..., unnorm_key=..., steering=direction path)."""
    # Local: registry plugin; policy_openvla imports torch + transformers (seconds) on use.
    from policies.openvla.policy_openvla import build_policy

    return build_policy(env=env, **kwargs)


def _loader(path: Any, env: Any = None, **kwargs: Any) -> Policy:
    """OpenVLA checkpoint folder (ours or the released layout), set up for ``env``."""
    # Local: registry plugin; policy_openvla imports torch + transformers (seconds) on use.
    from policies.openvla.policy_openvla import build_policy

    return build_policy(path=path, env=env, **kwargs)


POLICIES.register("openvla", _factory, help="OpenVLA VLA (path=folder or hub id; steerable alpha)")
CHECKPOINT_LOADERS.register("openvla", _loader, help="OpenVLA checkpoint (policy_type openvla)")
