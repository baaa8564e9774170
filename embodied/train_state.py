"""Optimizer state as flat safetensors tensors plus JSON, for resumable training.

Every resumable trainer (``embodied train pdp``, ``embodied train minijudge``) stores its
optimizer this way: the per-parameter tensors (Adam's moments, its step counts) under
``optim.<param index>.<name>`` in the checkpoint's safetensors file and the param groups
(learning rates, betas) in its JSON. Never pickle.
"""

from __future__ import annotations

from typing import Any

import torch


def optimizer_tensors(
    opt: torch.optim.Optimizer,
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """``opt``'s state as ``(tensors, json_meta)``; :func:`restore_optimizer` inverts it."""
    sd = opt.state_dict()
    tensors = {
        f"optim.{pid}.{k}": (v if torch.is_tensor(v) else torch.tensor(v)).contiguous()
        for pid, st in sd["state"].items()
        for k, v in st.items()
    }
    return tensors, {"param_groups": sd["param_groups"]}


def restore_optimizer(
    opt: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], meta: dict[str, Any]
) -> None:
    """Load the state :func:`optimizer_tensors` wrote (other keys of ``tensors`` are ignored)."""
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, v in tensors.items():
        if key.startswith("optim."):
            _, pid, name = key.split(".", 2)
            state.setdefault(int(pid), {})[name] = v
    opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
