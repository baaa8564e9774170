"""Parameterized Diffusion Policy (PDP): a diffusion policy steered by a behaviour latent z.

Following "From Noise to Control: Parameterized Diffusion Policies" (Zhang et al., 2026) in
two variants (``PDPConfig.variant``): ``reference``, the reference code (Valarzz/pdp) point by
point (one open-loop trajectory from the first state), and ``receding``, the project's
receding-horizon extension:

* :mod:`~policies.diffusion.configuration_pdp` - configs, variant presets (validated, JSON);
* :mod:`~policies.diffusion.modeling_manifold` - trajectory VAEs (reference, compact) +
  soft-DTW geometric loss;
* :mod:`~policies.diffusion.modeling_denoiser` - residual MLP / 1D U-Net with FiLM(z), and the
  reference's FiLMDiffusionMLP (z-MLP, z concatenated and FiLM);
* :mod:`~policies.diffusion.modeling_pdp` - normaliser, DDPM training, DDIM sampling;
* :mod:`~policies.diffusion.policy_pdp` - the :class:`~embodied.contracts.Policy` with knob z;
* :mod:`~policies.diffusion.training_pdp` - ``embodied train pdp`` (checkpoints, resume, TB);
* :mod:`~policies.diffusion.adaptation` - z from one demonstration (the reference: encoder
  warm start + optimisation), z from a constraint (CEM, extension), DP fine-tuning (baseline);
* :mod:`~embodied.apps.route_task` - reach_around demonstrations, rollouts, the quick demo;
* :mod:`~embodied.apps.lab.pdp` - the multimodal-task evaluation (``embodied lab pdp``);
* :mod:`~embodied.apps.lab.pdp_plots` - latent-space and route PNGs.

Importing this package registers the checkpoint loader ``policy_type == "pdp"`` and the
policy name ``pdp`` (``policies.load("pdp", path=DIR)``); torch/diffusers load lazily.
"""

from __future__ import annotations

import os
from typing import Any

from embodied.config import check_options
from embodied.contracts import Env, Policy
from embodied.errors import CheckpointError, ConfigError, EmbodiedError
from policies import CHECKPOINT_LOADERS, POLICIES


def _load_checkpoint(path: str | os.PathLike[str], env: Env | None = None, **kwargs: Any) -> Policy:
    """Load a PDP checkpoint folder (config.json policy_type "pdp"); ``env`` is not needed."""
    # Local: registry plugin; policy_pdp imports torch + diffusers (seconds) on use.
    from policies.diffusion.policy_pdp import PDPPolicy

    options = check_options(
        PDPPolicy.from_pretrained, kwargs, f"PDP checkpoint {str(path)!r}", skip=("cls", "path")
    )
    try:
        return PDPPolicy.from_pretrained(path, **options)
    except EmbodiedError:
        raise
    except (RuntimeError, ValueError, TypeError, ArithmeticError, KeyError, AttributeError) as exc:
        # a config.json whose sizes build no model (a negative width, a None count)
        raise CheckpointError(
            f"PDP checkpoint {str(path)!r}: its config.json describes no model that can be "
            f"built ({type(exc).__name__}: {exc})",
            fix="re-save the checkpoint with `embodied train pdp`, or repair config.json",
        ) from exc


def _make_pdp(env: Env | None = None, path: str | None = None, **kwargs: Any) -> Policy:
    """Parameterized diffusion policy loaded from a checkpoint (path=DIR or hub id)."""
    if path is None:
        raise ConfigError(
            "policy 'pdp' needs path=<checkpoint folder>",
            fix="train one with `embodied train pdp --data DIR --out CKPT` and pass path=CKPT",
        )
    policy = _load_checkpoint(path, **kwargs)
    if env is not None:
        policy.check_compatible(env)
    return policy


CHECKPOINT_LOADERS.register("pdp", _load_checkpoint)
POLICIES.register("pdp", _make_pdp)
