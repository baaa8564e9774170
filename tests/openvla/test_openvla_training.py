"""Behaviour cloning, checkpoint round trip through policies.load, closed-loop steering."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from embodied.errors import ConfigError
from policies.openvla.training_openvla import (
    BCSettings,
    DemonstrationSteps,
    build_tiny_vla,
    make_batch,
    step_sampler,
    train_bc,
)


def _toy_demonstrations(n: int = 48) -> DemonstrationSteps:
    """A bright square's position decides the action; the adverb decides its magnitude."""
    rng = np.random.default_rng(0)
    imgs = np.zeros((n, 64, 64, 3), dtype=np.uint8)
    acts = np.zeros((n, 4))
    instr = []
    for i in range(n):
        x, y = rng.integers(4, 56, size=2)
        imgs[i, y : y + 8, x : x + 8] = (255, 0, 0)
        fast = i % 2 == 0
        acts[i, :2] = (np.array([x, y]) - 30) / 30 * (0.2 if fast else 0.05)
        acts[i, 3] = -1.0
        instr.append("reach the red cube quickly" if fast else "reach the red cube slowly")
    return DemonstrationSteps(
        imgs, instr, acts, np.arange(n), np.where(np.arange(n) % 2 == 0, 0.2, 0.05)
    )


def test_bc_lowers_the_action_token_loss(tmp_path: Path) -> None:
    demonstrations = _toy_demonstrations()
    model, proc = build_tiny_vla(
        demonstrations.instructions, demonstrations.actions, "toy", mask=[True] * 3 + [False]
    )
    assert model.config.action_dim() == 4
    batch = make_batch(proc, demonstrations, np.arange(8))
    n_targets = int((batch["labels"] != -100).sum())
    assert n_targets == 8 * 4  # loss only on the action tokens
    assert batch["labels"][0, -4:].min() >= proc.actions.first_id
    hist = train_bc(
        model, proc, demonstrations, BCSettings(steps=40, batch_size=16, lr=3e-3, log_every=20)
    )
    assert hist[-1]["loss"] < 0.8 * hist[0]["loss"]
    with pytest.raises(ConfigError, match="share a non-zero length"):
        DemonstrationSteps(
            demonstrations.images[:2],
            demonstrations.instructions,
            demonstrations.actions,
            demonstrations.episode,
            demonstrations.concept,
        )


def test_episode_sampling_weighs_every_episode_the_same() -> None:
    """A 60-step slow episode and a 10-step fast one: ``steps`` sampling sees the slow one 6x
    as often, ``episodes`` sampling as often as the fast one, each step of an episode alike."""
    episode = np.array([0] * 60 + [1] * 10)
    demonstrations = DemonstrationSteps(
        np.zeros((70, 8, 8, 3), np.uint8),
        ["go"] * 70,
        np.zeros((70, 4)),
        episode,
        np.where(episode == 0, 0.04, 0.24),
    )
    n = 60_000
    by_step = step_sampler(demonstrations, "steps", np.random.default_rng(0))(n)
    assert np.mean(episode[by_step] == 0) == pytest.approx(60 / 70, abs=0.01)
    by_episode = step_sampler(demonstrations, "episodes", np.random.default_rng(0))(n)
    assert np.mean(episode[by_episode] == 0) == pytest.approx(0.5, abs=0.01)
    counts = np.bincount(by_episode, minlength=70)
    assert counts[:60].min() > 0.8 * n / 120 and counts[60:].min() > 0.8 * n / 20
    shuffled = demonstrations.subset(np.random.default_rng(1).permutation(70))  # not contiguous
    draw = step_sampler(shuffled, "episodes", np.random.default_rng(0))(n)
    assert np.mean(shuffled.episode[draw] == 0) == pytest.approx(0.5, abs=0.01)
    with pytest.raises(ConfigError, match="sampling 'frames'"):
        step_sampler(demonstrations, "frames", np.random.default_rng(0))
    with pytest.raises(ConfigError, match="sampling"):
        BCSettings(sampling="frames")


def test_checkpoint_loads_through_policies_and_steers_in_the_loop(tmp_path: Path) -> None:
    import controllers
    import policies
    import sim
    from embodied.concepts import make_concept
    from embodied.loop import Steering, rollout
    from policies.openvla.loading_openvla import save_pretrained
    from policies.openvla.steering import SteeringDirection

    demonstrations = _toy_demonstrations(8)
    model, proc = build_tiny_vla(
        demonstrations.instructions,
        demonstrations.actions,
        "mujoco_arm_reach",
        mask=[True] * 3 + [False],
    )
    save_pretrained(model, proc.tokenizer, tmp_path / "vla")
    direction = SteeringDirection(torch.randn(model.config.llm_dim), layer=0, concept="ee_speed")
    direction.save(tmp_path / "dir")
    env = sim.make("mujoco:arm_reach", image_size=64)
    policy = policies.load(tmp_path / "vla", steering=tmp_path / "dir", device="cpu")
    assert policy.knobs()["alpha"].high == (4.0,)
    pid = controllers.make("pid", kp=5.0, ki=10.0, output_min=-4.0, output_max=4.0)
    ep = rollout(
        env,
        policy,
        steering=Steering(make_concept("ee_speed"), pid, "alpha", 0.2),
        seed=0,
        max_steps=6,
        record_images=False,
    )
    alpha = ep.knobs["alpha"][:, 0]
    assert len(ep) == 6 and np.isfinite(ep.measurements).all()
    assert alpha[0] > 0  # below the speed setpoint at rest -> positive steering
    assert np.all(np.abs(alpha) <= 4.0)
    assert policy.hook is not None and policy.hook.calls == 6 * 4  # 4 action tokens per step


def test_cli_registers_steer_and_train_vla() -> None:
    from typer.testing import CliRunner

    from embodied.apps.cli import app

    runner = CliRunner()
    out = runner.invoke(app, ["lab", "steer", "--help"])
    assert out.exit_code == 0 and "experiment" in out.output and "extract" in out.output
    train = runner.invoke(app, ["train", "--help"])
    assert train.exit_code == 0, train.output
    assert "vla" in train.output and "pdp" in train.output
    vla = runner.invoke(app, ["train", "vla", "--help"])
    assert vla.exit_code == 0, vla.output
    assert "--demonstration-episodes" in vla.output and "--llm-layers" in vla.output


def test_train_vla_cli_one_process(tmp_path: Path) -> None:
    """`embodied train vla` in one process (no accelerate): it trains, writes a checkpoint
    that loads through ``policies.load`` and prints its final loss."""
    import json

    from typer.testing import CliRunner

    import policies
    import sim
    from embodied.apps.cli import app

    out = tmp_path / "vla"
    res = CliRunner().invoke(
        app,
        ["train", "vla", "--demonstration-episodes", "1", "--steps", "8", "--batch-size", "8",
         "--llm-layers", "1", "--out", str(out)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    training = json.loads((out / "config.json").read_text())["training"]
    assert training["world_size"] == 1
    curve = [r["loss"] for r in training["history"]]
    assert len(curve) == 8 and curve[-1] < curve[0]  # it trains
    assert json.loads(res.stdout.strip().splitlines()[-1])["final_loss"] == curve[-1]
    env = sim.make("mujoco:arm_reach", image_size=64)
    policy = policies.load(out, device="cpu")
    policy.check_compatible(env)
    obs, _ = env.reset(seed=0)
    chunk = policy.predict_action_chunk(obs)
    assert chunk.shape[1:] == (env.action_spec.dim,) and np.isfinite(chunk).all()
    env.close()
