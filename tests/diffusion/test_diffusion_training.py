"""Training: manifold + policy, resumable checkpoints (bitwise continuation), CLI, TB logs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from embodied.errors import CheckpointError
from policies.diffusion.processor_pdp import Demonstrations, load_demonstrations, make_windows
from policies.diffusion.training_pdp import load_train_latents, train_pdp
from tests.diffusion.conftest import tiny_config


def test_windows_pad_and_align(demonstrations: Demonstrations) -> None:
    obs, chunks, idx = make_windows(demonstrations, n_obs_steps=2, horizon=8)
    n = sum(len(s) for s in demonstrations.states)
    assert obs.shape == (n, 2, 4) and chunks.shape == (n, 8, 2) and idx.shape == (n,)
    np.testing.assert_array_equal(obs[0, 0], obs[0, 1])  # start padded with state 0
    last = len(demonstrations.states[0]) - 1
    np.testing.assert_array_equal(chunks[last, -1], demonstrations.actions[0][-1])  # end padded


def test_train_resume_continues_bitwise(demonstrations: Demonstrations, tmp_path: Path) -> None:
    cfg = tiny_config(steps=8)
    full = train_pdp(
        demonstrations,
        tmp_path / "full",
        cfg,
        checkpoint_every=4,
        progress=False,
        tensorboard=False,
    )
    assert full.steps == 8 and np.isfinite(full.final_loss)
    # "killed" after 4 steps (the last checkpoint), then resumed
    part = train_pdp(
        demonstrations,
        tmp_path / "part",
        cfg,
        checkpoint_every=4,
        progress=False,
        tensorboard=False,
        stop_after=4,
    )
    assert part.steps == 4
    meta = json.loads((tmp_path / "part" / "train_state.json").read_text())
    assert meta["step"] == 4
    resumed = train_pdp(
        demonstrations,
        tmp_path / "part",
        None,
        resume=True,
        checkpoint_every=4,
        progress=False,
        tensorboard=False,
    )
    assert resumed.steps == 8
    a = load_file(str(tmp_path / "full" / "model.safetensors"))
    b = load_file(str(tmp_path / "part" / "model.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    # only the newest train-state tensor file is kept
    assert len(list((tmp_path / "part").glob("train_state_*.safetensors"))) == 1


def test_latents_separate_route_classes(demonstrations: Demonstrations, tmp_path: Path) -> None:
    cfg = tiny_config(steps=1)
    cfg.manifold.steps = 60
    res = train_pdp(demonstrations, tmp_path, cfg, progress=False, tensorboard=False)
    lat, labels = load_train_latents(tmp_path)
    np.testing.assert_allclose(lat, res.demonstration_latents, rtol=1e-5, atol=1e-5)
    # whitened: unit variance along the principal axis, never more along any axis
    eig = np.linalg.eigvalsh(np.cov(lat, rowvar=False))
    assert eig.max() == pytest.approx(1.0, abs=1e-3) and eig.min() <= 1.0 + 1e-3
    lab = np.asarray(labels)
    left, right = lat[lab == "left"], lat[lab == "right"]
    gap = np.linalg.norm(left.mean(0) - right.mean(0))
    spread = max(left.std(0).max(), right.std(0).max())
    assert gap > 2.0 * spread  # the geometric loss puts the two routes apart


def test_train_state_written_before_the_rename_still_loads_and_resumes(
    demonstrations: Demonstrations, tmp_path: Path
) -> None:
    """Train states name the latents ``demonstration_latents``; older ones ``demo_latents``."""
    from safetensors.torch import save_file

    from policies.diffusion.training_pdp import LATENTS_KEY, OLD_LATENTS_KEY

    cfg = tiny_config(steps=4)
    first = train_pdp(
        demonstrations,
        tmp_path,
        cfg,
        checkpoint_every=2,
        progress=False,
        tensorboard=False,
        stop_after=2,
    )
    meta = json.loads((tmp_path / "train_state.json").read_text())
    tensors_file = tmp_path / Path(meta["tensors"]).name
    tensors = load_file(str(tensors_file))
    assert LATENTS_KEY in tensors and OLD_LATENTS_KEY not in tensors
    tensors[OLD_LATENTS_KEY] = tensors.pop(LATENTS_KEY)  # as an older version wrote it
    save_file(tensors, str(tensors_file))
    latents, _ = load_train_latents(tmp_path)
    np.testing.assert_allclose(latents, first.demonstration_latents, rtol=1e-5, atol=1e-5)
    resumed = train_pdp(
        demonstrations, tmp_path, None, resume=True, progress=False, tensorboard=False
    )
    assert resumed.steps == 4
    np.testing.assert_allclose(
        resumed.demonstration_latents, first.demonstration_latents, rtol=1e-5, atol=1e-5
    )


def test_resume_without_state_is_an_error(demonstrations: Demonstrations, tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="--resume"):
        train_pdp(demonstrations, tmp_path, tiny_config(), resume=True, progress=False)


def test_cli_trains_on_real_env_dataset(reach_dataset: Path, tmp_path: Path) -> None:
    from embodied.apps.cli import app

    demonstrations = load_demonstrations(reach_dataset)
    assert demonstrations.state_dim == 8 and set(demonstrations.labels) <= {
        "left",
        "center",
        "right",
    }
    out = tmp_path / "ckpt"
    result = CliRunner().invoke(
        app,
        [
            "train",
            "pdp",
            "--data",
            str(reach_dataset),
            "--out",
            str(out),
            "--steps",
            "6",
            "--manifold-steps",
            "3",
            "--hidden-dim",
            "32",
            "--batch-size",
            "16",
            "--checkpoint-every",
            "3",
            "--exclude-state",
            "vel_x,vel_y",
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output.strip().splitlines()[-1])
    assert summary["steps"] == 6
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["env_id"] == "mujoco:reach_around" and cfg["state_names"][0] == "pos_x"
    assert cfg["obs_dims"] == [0, 1, 4, 5, 6, 7]  # velocities hidden from the denoiser
    assert list((out / "tb").glob("events.out.tfevents.*"))
    assert not list(out.rglob("*.pt")) and not list(out.rglob("*.pkl"))
    # the one-demonstration adaptation command runs on the checkpoint and reports before/after
    adapt = CliRunner().invoke(
        app, ["lab", "pdp", "adapt", "--policy", str(out), "--steps", "2", "--n-eval", "1"]
    )
    assert adapt.exit_code == 0, adapt.output
    report = json.loads(adapt.output.strip().splitlines()[-1])
    assert (
        report["method"] == "demonstration"
        and report["n"] == 1
        and len(report["z"]) == cfg["z_dim"]
    )


def test_dims_derived_from_data_not_base_config(reach_dataset: Path, tmp_path: Path) -> None:
    res = train_pdp(
        reach_dataset,
        tmp_path,
        tiny_config(state_dim=4, steps=1),
        progress=False,
        tensorboard=False,
    )
    cfg = json.loads((res.out_dir / "config.json").read_text())
    assert cfg["state_dim"] == 8 and cfg["obs_dims"] == list(range(8))
    assert cfg["path_dims"] == [0, 1]


def test_exclude_unknown_state_name_is_an_error(reach_dataset: Path, tmp_path: Path) -> None:
    from embodied.errors import ConfigError

    with pytest.raises(ConfigError, match="vel_q"):
        train_pdp(
            reach_dataset,
            tmp_path,
            tiny_config(),
            overrides={"obs_exclude": ["vel_q"]},
            progress=False,
            tensorboard=False,
        )


def test_unet_denoiser_trains_and_acts(demonstrations: Demonstrations, tmp_path: Path) -> None:
    from policies.diffusion.policy_pdp import PDPPolicy

    res = train_pdp(
        demonstrations,
        tmp_path,
        tiny_config(denoiser="unet", steps=3),
        progress=False,
        tensorboard=False,
    )
    assert res.steps == 3 and np.isfinite(res.final_loss)
    policy = PDPPolicy.from_pretrained(tmp_path)
    assert policy.config.denoiser == "unet"
    chunk = policy.predict_action_chunk({"state": demonstrations.states[0][0].astype(np.float32)})
    assert chunk.shape == (8, 2) and np.isfinite(chunk).all()
