"""The ``reference`` variant against outputs of the PDP reference code (Valarzz/pdp).

``fixtures/pdp_reference.safetensors`` holds weights, inputs and outputs of the reference's
``FiLMDiffusionMLP``, ``PDPDiffusion`` (DDIM with x0 clipping and noise recomputation),
``TrajectoryVAE`` and soft-DTW divergence, written by ``fixtures/make_pdp_reference_fixtures.py``
from the reference repository. The project's classes load the reference weights by key.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

from embodied.errors import ConfigError
from embodied.specs import Observation
from policies.diffusion.configuration_pdp import VARIANT_PRESETS, ManifoldConfig, PDPConfig
from policies.diffusion.modeling_manifold import (
    ReferenceTrajectoryVAE,
    rolled_geometric_loss,
    soft_dtw,
)
from policies.diffusion.modeling_pdp import PDPModel
from policies.diffusion.processor_pdp import Demonstrations, hold_pad, policy_windows

FIXTURE = Path(__file__).parent / "fixtures" / "pdp_reference.safetensors"


@pytest.fixture(scope="module")
def ref() -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    with safe_open(str(FIXTURE), "pt") as f:
        names = list(f.keys())
        return {k: f.get_tensor(k) for k in names}, dict(f.metadata())


def _config(meta: dict[str, str], **kw: object) -> PDPConfig:
    sizes = [int(v) for v in meta["mlp_dims"].strip("()").split(",")]
    return PDPConfig.for_variant(
        "reference",
        state_dim=int(meta["state_dim"]),
        action_dim=int(meta["action_dim"]),
        horizon=int(meta["horizon"]),
        n_action_steps=int(meta["horizon"]),
        z_dim=int(meta["z_dim"]),
        hidden_dim=sizes[0],
        n_blocks=len(sizes),
        **kw,
    )


def _model(ref: tuple[dict[str, torch.Tensor], dict[str, str]]) -> PDPModel:
    tensors, meta = ref
    model = PDPModel(_config(meta)).eval()
    state = {k[len("denoiser.") :]: v for k, v in tensors.items() if k.startswith("denoiser.")}
    model.denoiser.load_state_dict(state, strict=True)  # the reference's keys, all of them
    return model


def test_reference_denoiser_matches_the_reference_network(ref) -> None:
    t = ref[0]
    with torch.no_grad():
        eps = _model(ref).denoiser(t["x"], t["t"], t["cond"], t["z"])
    torch.testing.assert_close(eps, t["eps"], rtol=1e-5, atol=1e-5)


def test_reference_ddim_sampler_matches_with_clipping_and_eps_recompute(ref) -> None:
    t = ref[0]
    model = _model(ref)
    with torch.no_grad():
        sample = model.sample(t["cond"], t["z"], noise=t["x_init"].clone())
    torch.testing.assert_close(sample, t["sample"], rtol=1e-4, atol=1e-5)
    # without recomputing the noise after clipping, the result differs (the check can fail)
    model.config.recompute_eps = False
    with torch.no_grad():
        other = model.sample(t["cond"], t["z"], noise=t["x_init"].clone())
    assert (other - t["sample"]).abs().max() > 1e-3


def test_reference_vae_matches_encoder_decoder_and_geometry_loss(ref) -> None:
    t, meta = ref
    mcfg = ManifoldConfig(
        **{
            **VARIANT_PRESETS["reference"]["manifold"],
            "z_dim": int(meta["z_dim"]),
            "d_model": int(meta["enc_hidden"]),
            "n_layers": int(meta["enc_layers"]),
            "n_heads": int(meta["enc_heads"]),
            "decoder_hidden": int(meta["enc_hidden"]),
        }
    )
    vae = ReferenceTrajectoryVAE(mcfg, int(meta["state_dim"]), int(meta["action_dim"])).eval()
    # the reference decoder's hidden width is its encoder's; here decoder_hidden carries it
    vae.load_state_dict({k[4:]: v for k, v in t.items() if k.startswith("vae.")}, strict=True)
    with torch.no_grad():
        mu, logvar = vae.encode(t["vae_states"], t["vae_actions"])
        pred_s, pred_a = vae.decode(mu, t["vae_states"].shape[1])
    torch.testing.assert_close(mu, t["vae_z_mean"], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(logvar, t["vae_z_logvar"], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(pred_s, t["vae_pred_states"], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(pred_a, t["vae_pred_actions"], rtol=1e-4, atol=1e-5)
    geom = t["vae_states"][:, :, :2].double()
    rolled = torch.roll(geom, 1, 0)
    divergence = soft_dtw(geom, rolled, 1e-5) - 0.5 * (
        soft_dtw(geom, geom, 1e-5) + soft_dtw(rolled, rolled, 1e-5)
    )
    np.testing.assert_allclose(divergence.numpy(), t["sdtw_divergence"].double().numpy(), rtol=1e-5)
    geo = rolled_geometric_loss(mu, divergence.float())
    assert geo.item() == pytest.approx(t["geo_loss"].item(), rel=1e-4)


def test_reference_windows_are_first_state_and_whole_padded_trajectory() -> None:
    demos = Demonstrations(
        [np.arange(8.0).reshape(4, 2), np.arange(12.0).reshape(6, 2)],
        [np.ones((4, 1)), 2 * np.ones((6, 1))],
    )
    cfg = PDPConfig.for_variant("reference", state_dim=2, action_dim=1, horizon=6, n_action_steps=6)
    obs, chunks, idx = policy_windows(demos, cfg)
    assert obs.shape == (2, 1, 2) and chunks.shape == (2, 6, 1) and idx.tolist() == [0, 1]
    np.testing.assert_array_equal(obs[:, 0], [[0.0, 1.0], [0.0, 1.0]])
    np.testing.assert_array_equal(chunks[0, :, 0], [1, 1, 1, 1, 0, 0])  # held still after the end
    padded = hold_pad(demos, 6)
    np.testing.assert_array_equal(padded.states[0][-3:], [[6.0, 7.0]] * 3)
    receding = policy_windows(demos, PDPConfig(state_dim=2, action_dim=1))[0]
    assert len(receding) == 10  # one window per step


def test_reference_preset_follows_the_reference_configs() -> None:
    cfg = PDPConfig.for_variant("reference")
    assert (cfg.denoiser, cfg.hidden_dim, cfg.n_blocks, cfg.time_embed_dim) == (
        "film_mlp",
        768,
        5,
        16,
    )
    assert cfg.z_mlp_dims == (16, 32) and cfg.n_obs_steps == 1
    assert (cfg.num_train_timesteps, cfg.num_inference_steps, cfg.recompute_eps) == (20, 8, True)
    assert (cfg.optimizer, cfg.lr, cfg.weight_decay, cfg.batch_size, cfg.steps) == (
        "adam",
        1e-4,
        1e-6,
        256,
        8000,
    )
    m = cfg.manifold
    assert (m.architecture, m.d_model, m.n_layers, m.n_heads, m.sdtw_gamma) == (
        "reference",
        128,
        4,
        4,
        1e-5,
    )
    assert (m.lr, m.batch_size, m.epochs, m.kl_weight, m.standardize_z) == (
        1e-4,
        32,
        5000,
        1e-3,
        False,
    )
    assert cfg.first_window_only and not PDPConfig().first_window_only


TINY_REFERENCE = {
    "variant": "reference",
    "hidden_dim": 32,
    "n_blocks": 2,
    "steps": 30,
    "manifold.d_model": 16,
    "manifold.n_heads": 2,
    "manifold.n_layers": 1,
    "manifold.decoder_hidden": 16,
    "manifold.epochs": 3,
    "manifold.batch_size": 4,
}


def test_reference_variant_trains_resumes_and_acts_open_loop(
    demonstrations: Demonstrations, tmp_path: Path
) -> None:
    from policies.diffusion.policy_pdp import PDPPolicy
    from policies.diffusion.training_pdp import load_train_latents, manifold_steps, train_pdp

    cut = [14 + i % 5 for i in range(len(demonstrations))]  # unequal lengths: held to 18
    demos = Demonstrations(
        [s[:n] for s, n in zip(demonstrations.states, cut, strict=True)],
        [a[:n] for a, n in zip(demonstrations.actions, cut, strict=True)],
        demonstrations.labels,
    )
    out = tmp_path / "ref"
    train_pdp(demos, out, None, overrides=TINY_REFERENCE, progress=False, stop_after=10)
    result = train_pdp(demos, out, None, resume=True, progress=False)
    assert result.steps == 30
    policy = PDPPolicy.from_pretrained(out)
    cfg = policy.config
    assert (cfg.horizon, cfg.n_action_steps, cfg.n_obs_steps) == (18, 18, 1)
    assert manifold_steps(len(demos), cfg.manifold) == 3 * (len(demos) // 4)
    # the latents stored by training are what the encoder gives the same demonstrations
    raw = policy.model.encode_demonstrations(demos.states, demos.actions)
    knob, _ = load_train_latents(out)
    np.testing.assert_allclose(raw.numpy(), knob, rtol=1e-4, atol=1e-5)  # raw z is the knob
    calls = []
    plan = policy.predict_action_chunk

    def counted(obs: Observation) -> np.ndarray:
        calls.append(1)
        return plan(obs)

    policy.predict_action_chunk = counted  # type: ignore[method-assign]
    policy.reset()
    policy.seed_episode(3)
    first = [policy.select_action({"state": demos.states[0][0]}) for _ in range(18)]
    assert len(calls) == 1  # one whole trajectory from the first state: open loop
    assert np.asarray(first).shape == (18, cfg.action_dim)
    policy.reset()
    policy.seed_episode(3)
    again = [policy.select_action({"state": demos.states[0][0]}) for _ in range(18)]
    np.testing.assert_array_equal(first, again)  # same episode seed, same noise
    policy.reset()
    policy.seed_episode(4)
    other = [policy.select_action({"state": demos.states[0][0]}) for _ in range(18)]
    assert not np.array_equal(first, other)


def test_position_targets_round_trip_and_are_tracked_from_the_measured_state() -> None:
    from policies.diffusion.processor_pdp import env_action, model_actions

    cfg = PDPConfig(state_dim=4, action_dim=2, action_space="position_targets", control_dt=0.05)
    rng = np.random.default_rng(0)
    states, actions = rng.normal(size=(6, 4)), rng.normal(size=(6, 2))
    targets = model_actions(states, actions, cfg)
    np.testing.assert_allclose(targets, states[:, :2] + 0.05 * actions)
    back = np.stack([env_action(t, s, cfg) for t, s in zip(targets, states, strict=True)])
    np.testing.assert_allclose(back, actions)
    # a plan made at the first state still aims at its targets when the agent drifted
    drifted = states[3] + np.array([0.01, -0.02, 0.0, 0.0])
    np.testing.assert_allclose(
        env_action(targets[3], drifted, cfg), actions[3] - np.array([0.01, -0.02]) / 0.05
    )
    with pytest.raises(ConfigError, match="control_dt"):
        PDPConfig(state_dim=4, action_dim=2, action_space="position_targets")
    with pytest.raises(ConfigError, match="action_space"):
        PDPConfig(state_dim=4, action_dim=2, action_space="joint")


def test_position_target_policy_trains_on_targets_and_commands_velocities(
    reach_dataset: Path, tmp_path: Path
) -> None:
    from embodied.loop import rollout
    from policies.diffusion.policy_pdp import PDPPolicy
    from policies.diffusion.processor_pdp import load_demonstrations, model_actions
    from policies.diffusion.training_pdp import train_pdp

    overrides = {**TINY_REFERENCE, "z_dim": 0, "action_space": "position_targets", "steps": 5}
    train_pdp(reach_dataset, tmp_path / "p", None, overrides=overrides, progress=False)
    policy = PDPPolicy.from_pretrained(tmp_path / "p")
    assert policy.config.control_dt == pytest.approx(0.05)  # from the dataset's 20 Hz
    demos = load_demonstrations(reach_dataset)
    targets = np.concatenate(
        [
            model_actions(s, a, policy.config)
            for s, a in zip(demos.states, demos.actions, strict=True)
        ]
    )
    np.testing.assert_allclose(
        policy.model.normalizer.action_min.numpy(), targets.min(0), rtol=1e-5
    )
    import sim

    plans: list[np.ndarray] = []
    plan = policy.predict_action_chunk

    def recorded(obs: Observation) -> np.ndarray:
        plans.append(plan(obs))
        return plans[-1]

    policy.predict_action_chunk = recorded  # type: ignore[method-assign]
    env = sim.make("mujoco:reach_around")
    ep = rollout(env, policy, seed=5, max_steps=6, record_images=False)
    assert len(plans) == 1  # one open-loop plan of positions ...
    states = ep.observations["state"]
    expected = (plans[0][:6] - states[:6, :2]) / 0.05  # ... each tracked from the state then
    np.testing.assert_allclose(ep.raw_actions, expected, rtol=1e-5, atol=1e-6)
