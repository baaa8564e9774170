"""Training speed switches (TrainSpeedConfig): each gives the plain path's loss on a fixed
batch, resumes bitwise, and the in-memory frame cache holds exactly the file's frames."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import torch

from policies.diffusion.configuration_pdp import PDPConfig, TrainSpeedConfig
from policies.diffusion.modeling_pdp import PDPModel
from policies.diffusion.modeling_vision import crop_offsets
from policies.diffusion.processor_pdp import policy_windows, window_frames
from policies.diffusion.training_pdp import (
    autocast_dtype,
    frame_cache,
    make_optimizer,
    native_bf16,
)
from tests.diffusion.conftest import tiny_config
from tests.diffusion.test_diffusion_vision import SIZE, tiny_vision

# Tolerances, relative to the plain path's loss on the same batch and weights: float32
# switches only reorder sums; bf16 convolutions keep 8 mantissa bits in the backbone only.
FP32_RTOL = 1e-5
BF16_RTOL = 2e-2


def _model() -> PDPModel:
    torch.manual_seed(0)
    cfg: PDPConfig = tiny_config(z_dim=0, vision=tiny_vision(), state_dim=4, action_dim=2)
    model = PDPModel(cfg)
    model.normalizer.set_stats(
        state_min=-np.ones(4), state_max=np.ones(4), action_min=-np.ones(2), action_max=np.ones(2)
    )
    assert model.obs_encoder is not None
    model.obs_encoder.set_image_stats(torch.full((2, 3), 0.4), torch.full((2, 3), 0.2))
    return model.train()


def _batch(model: PDPModel) -> dict[str, torch.Tensor]:
    cfg, b = model.config, 16
    gen = torch.Generator().manual_seed(1)
    n = cfg.n_obs_steps
    return {
        "obs": torch.randn(b, n * 4, generator=gen),
        "actions": torch.rand(b, cfg.horizon, 2, generator=gen) * 2 - 1,
        "images": torch.randint(0, 256, (b, 2, n, SIZE, SIZE, 3), dtype=torch.uint8, generator=gen),
        "text": torch.randn(b, cfg.vision.text_dim, generator=gen),
        "offsets": crop_offsets(b * 2 * n, (SIZE, SIZE), cfg.vision.crop, True, gen),
        "noise": torch.randn(b, cfg.horizon, 2, generator=gen),
        "timesteps": torch.randint(0, cfg.num_train_timesteps, (b,), generator=gen),
    }


def _loss_and_grad(model: PDPModel, batch: dict[str, torch.Tensor]) -> tuple[float, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss = model.compute_loss(
        batch["obs"], batch["actions"], None, timesteps=batch["timesteps"], noise=batch["noise"],
        images=batch["images"], text=batch["text"], offsets=batch["offsets"],
    )  # fmt: skip
    loss.backward()
    grad = torch.cat([p.grad.flatten() for p in model.policy_parameters() if p.grad is not None])
    return float(loss.detach()), grad


@pytest.mark.parametrize(
    ("switch", "rtol"),
    [
        ({"channels_last": True}, FP32_RTOL),
        ({"autocast": torch.bfloat16}, BF16_RTOL),
        ({"autocast": torch.bfloat16, "channels_last": True}, BF16_RTOL),
    ],
)
def test_speed_switch_gives_the_plain_loss(switch: dict[str, object], rtol: float) -> None:
    plain = _model()
    fast = copy.deepcopy(plain)
    assert fast.obs_encoder is not None
    fast.obs_encoder.set_compute(
        switch.get("autocast"),  # type: ignore[arg-type]
        bool(switch.get("channels_last", False)),
    )
    batch = _batch(plain)
    loss_plain, grad_plain = _loss_and_grad(plain, batch)
    loss_fast, grad_fast = _loss_and_grad(fast, batch)
    assert abs(loss_fast - loss_plain) <= rtol * abs(loss_plain), (loss_fast, loss_plain)
    cosine = torch.nn.functional.cosine_similarity(grad_fast, grad_plain, dim=0)
    assert cosine > 1 - rtol, float(cosine)
    encoder: Any = fast.obs_encoder.rgb[0]
    conv = encoder.backbone.conv1.weight
    if switch.get("channels_last"):  # the switch is engaged, not silently ignored
        assert conv.is_contiguous(memory_format=torch.channels_last) and not conv.is_contiguous()
    if switch.get("autocast") is not None:  # bf16 rounding shows: the backbone ran in bf16
        assert loss_fast != loss_plain


@pytest.mark.slow
def test_compiled_backbone_gives_the_plain_loss() -> None:
    plain = _model()
    fast = copy.deepcopy(plain)
    assert fast.obs_encoder is not None
    fast.obs_encoder.set_compute(None, channels_last=False, compile=True)
    batch = _batch(plain)
    loss_plain, grad_plain = _loss_and_grad(plain, batch)
    loss_fast, grad_fast = _loss_and_grad(fast, batch)
    assert abs(loss_fast - loss_plain) <= 1e-4 * abs(loss_plain)
    torch.testing.assert_close(grad_fast, grad_plain, rtol=1e-3, atol=1e-5)
    # compiled in place: the checkpoint keys are the plain model's
    assert list(fast.state_dict()) == list(plain.state_dict())


def test_fused_optimizer_makes_the_plain_update() -> None:
    plain = _model()
    fused = copy.deepcopy(plain)
    opt_plain = make_optimizer(plain, plain.config, TrainSpeedConfig.plain())
    opt_fused = make_optimizer(fused, fused.config, TrainSpeedConfig(fused_optimizer=True))
    assert opt_fused.defaults.get("fused") and not opt_plain.defaults.get("fused")
    batch = _batch(plain)
    start = [p.detach().clone() for p in plain.policy_parameters()]
    for model, opt in ((plain, opt_plain), (fused, opt_fused)):
        for _ in range(3):
            _loss_and_grad(model, batch)
            opt.step()
    # Adam moves each weight by ~lr per step: agreement to 1 % of one step (other op order)
    lr = plain.config.lr
    moved = 0.0
    for a, b, s in zip(plain.policy_parameters(), fused.policy_parameters(), start, strict=True):
        torch.testing.assert_close(a, b, rtol=0.0, atol=0.01 * lr)
        moved = max(moved, float((a.detach() - s).abs().max()))
    assert moved > lr  # the steps did move the weights


def test_autocast_auto_follows_the_hardware() -> None:
    cpu = torch.device("cpu")
    assert autocast_dtype(TrainSpeedConfig(autocast="off"), cpu) is None
    assert autocast_dtype(TrainSpeedConfig(autocast="bf16"), cpu) is torch.bfloat16
    auto = autocast_dtype(TrainSpeedConfig(autocast="auto"), cpu)
    assert auto is (torch.bfloat16 if native_bf16(cpu) else None)
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    if "amx_bf16" in flags or "avx512_bf16" in flags.split():
        assert native_bf16(cpu)


def test_bad_autocast_names_the_key_and_the_fix() -> None:
    from embodied.errors import ConfigError

    with pytest.raises(ConfigError, match=r"autocast='fp8'.*auto.*bf16.*off"):
        TrainSpeedConfig(autocast="fp8")


def test_frame_cache_equals_the_hdf5_frames(tmp_path: Path) -> None:
    from sim.libero import load_demonstrations as load_libero
    from tests.libero.test_libero_demonstrations import write_libero_demonstration_file

    path = tmp_path / "put_the_black_bowl_on_the_plate_demo.hdf5"
    write_libero_demonstration_file(path, lengths=(6, 9, 4))
    from policies.diffusion.processor_pdp import load_demonstrations

    cams = ("agentview", "eye_in_hand")
    demos = load_demonstrations(load_libero(path), cameras=cams)
    cfg = PDPConfig(state_dim=8, action_dim=7, z_dim=0, n_obs_steps=2, horizon=4)
    cache = frame_cache(demos, cams)
    idx = window_frames(demos, cfg)
    _, _, demo_idx = policy_windows(demos, cfg)
    with h5py.File(path, "r") as f:
        for cam, frames in zip(cams, cache, strict=True):
            assert frames.dtype == torch.uint8
            stored = [f[f"data/demo_{i}/obs/{cam}_rgb"][()] for i in range(3)]
            starts = np.cumsum([0] + [len(s) for s in stored])
            for w, (rows, d) in enumerate(zip(idx, demo_idx, strict=True)):
                for k, row in enumerate(rows):
                    t = row - starts[d]
                    # the window's k-th frame is step max(0, t_w - n + 1 + k) of its demonstration
                    assert 0 <= t < len(stored[d]), (w, k)
                    np.testing.assert_array_equal(frames[row].numpy(), stored[d][t])
            np.testing.assert_array_equal(frames.numpy(), np.concatenate(stored))


def test_snapshots_keep_the_ema_policy_over_training_time(tmp_path: Path) -> None:
    from policies.diffusion.policy_pdp import load_model
    from policies.diffusion.training_pdp import SNAPSHOT_JSON, train_pdp
    from tests.diffusion.conftest import synthetic_demonstrations

    demos = synthetic_demonstrations()
    cfg = tiny_config(z_dim=0, steps=4)
    kw = {"progress": False, "tensorboard": False, "checkpoint_every": 1}
    train_pdp(demos, tmp_path, cfg, stop_after=2, snapshot_every_s=1e-9, **kw)  # type: ignore[arg-type]
    train_pdp(demos, tmp_path, cfg, resume=True, snapshot_every_s=1e-9, **kw)  # type: ignore[arg-type]
    snaps = sorted((tmp_path / "snapshots").glob("step_*"))
    assert [p.name for p in snaps] == [f"step_{k:07d}" for k in (1, 2, 3, 4)]
    metas = [json.loads((p / SNAPSHOT_JSON).read_text()) for p in snaps]
    seconds = [m["train_seconds"] for m in metas]
    assert [m["step"] for m in metas] == [1, 2, 3, 4]
    assert seconds == sorted(seconds) and seconds[0] > 0  # summed over the resumed call
    final = load_model(tmp_path)
    last = load_model(snaps[-1])
    for key, value in final.state_dict().items():  # the last snapshot is the final policy
        torch.testing.assert_close(value, last.state_dict()[key])
    assert not list((tmp_path / "snapshots").glob(".*"))  # no temporary folder left


def test_snapshot_period_must_be_positive(tmp_path: Path) -> None:
    from embodied.errors import ConfigError
    from policies.diffusion.training_pdp import train_pdp
    from tests.diffusion.conftest import synthetic_demonstrations

    with pytest.raises(ConfigError, match="snapshot_every_s=0"):
        train_pdp(synthetic_demonstrations(), tmp_path, tiny_config(z_dim=0, steps=2),
                  progress=False, tensorboard=False, snapshot_every_s=0)  # fmt: skip


def test_bench_libero_row_times_plain_and_fast_side_by_side(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from embodied.apps.bench.policy import PEER_ENV, _time_libero_training

    monkeypatch.delenv(PEER_ENV, raising=False)
    row = _time_libero_training(steps=1, peer_steps=1)
    for r in (row, row["width16"], row["resnet18"]):
        assert r["train_samples_per_s"] > 0 and r["train_samples_per_s_plain"] > 0
        # speedup is rounded to 0.01: a slow step on a loaded machine (0.096 -> 0.1) is within
        # that rounding, not 2 % of it
        assert r["speedup"] == pytest.approx(
            r["train_samples_per_s"] / r["train_samples_per_s_plain"], rel=0.02, abs=0.006
        )
    widths = (row["backbone_width"], row["width16"]["backbone_width"])
    assert (*widths, row["resnet18"]["backbone_width"]) == (32, 16, 64)
    assert PEER_ENV in row["lerobot"]["not_run"] and "ratio_to_lerobot" not in row
