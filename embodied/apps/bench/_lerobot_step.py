"""Time lerobot's ``DiffusionPolicy`` training step; run with a scratch venv's Python.

Not imported by the project: ``embodied bench policy`` runs this file with the interpreter
named by ``$EMBODIED_PEER_LEROBOT`` (a virtualenv holding lerobot, see
``../shared/peers/README.md``) and reads one JSON line from it. Only the standard library,
torch and lerobot are imported here.

The batch has the shape of the LIBERO visuomotor DP that ``dp_visuomotor_libero`` times:
8-dim state, two RGB cameras, 7-dim actions, one observation step, horizon 16 (8 executed),
random crop, batch 64, AdamW (lerobot's preset: lr 1e-4, betas 0.95/0.999, weight decay
1e-6). lerobot's defaults otherwise: torchvision ResNet-18 without pretrained weights,
GroupNorm, 32 keypoints, U-Net denoiser. The batch is already normalised (lerobot normalises
in its processor pipeline, outside the policy).

Usage: ``python _lerobot_step.py IMAGE_PX CROP_PX STEPS THREADS``
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    """Print ``{"samples_per_s": ..., "step_ms": [...], "params": ...}``."""
    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
    from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy

    image, crop, steps, threads = (int(a) for a in sys.argv[1:5])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cams = ("agentview", "eye_in_hand")
    inputs = {"observation.state": PolicyFeature(type=FeatureType.STATE, shape=(8,))}
    for cam in cams:
        inputs[f"observation.images.{cam}"] = PolicyFeature(
            type=FeatureType.VISUAL, shape=(3, image, image)
        )
    cfg = DiffusionConfig(
        input_features=inputs,
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(7,))},
        n_obs_steps=1,
        horizon=16,
        n_action_steps=8,
        crop_shape=(crop, crop),
        pretrained_backbone_weights=None,
        use_group_norm=True,
        device="cpu",
    )
    policy = DiffusionPolicy(cfg)
    policy.train()
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-4, betas=(0.95, 0.999), weight_decay=1e-6)
    b = 64
    batch = {
        "observation.state": torch.randn(b, 1, 8),
        "action": torch.randn(b, 16, 7).clamp(-1, 1),
        "action_is_pad": torch.zeros(b, 16, dtype=torch.bool),
    }
    for cam in cams:
        batch[f"observation.images.{cam}"] = torch.rand(b, 1, 3, image, image)
    times = []
    for i in range(steps + 2):
        t0 = time.perf_counter()
        loss, _ = policy.forward(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if i >= 2:  # warm-up
            times.append(time.perf_counter() - t0)
    times.sort()
    median = times[len(times) // 2]
    params = sum(p.numel() for p in policy.parameters())
    print(
        json.dumps(
            {"samples_per_s": b / median, "step_ms": [t * 1e3 for t in times], "params": params}
        )
    )


if __name__ == "__main__":
    main()
