"""Steering directions, neuron clusters and hooks on the tiny OpenVLA."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from embodied.contracts import Steerable
from embodied.errors import CheckpointError, ConfigError
from policies.openvla.policy_openvla import OpenVLAPolicy
from policies.openvla.steering import (
    NeuronCluster,
    SteeringDirection,
    SteeringHook,
    collect_activations,
    load_intervention,
    mean_difference,
    select_neurons,
)


def _inputs(proc, n: int = 2):  # type: ignore[no-untyped-def]
    imgs = [
        np.random.default_rng(i).integers(0, 255, (64, 64, 3), dtype=np.uint8) for i in range(n)
    ]
    ids, mask = proc.encode_prompts(["reach the red cube", "reach the blue cube quickly"][:n])
    return proc.images(imgs), ids, mask


def _direction(model, seed: int = 0) -> SteeringDirection:  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(seed)
    return SteeringDirection(
        torch.randn(model.config.llm_dim, generator=g), layer=1, concept="ee_speed"
    )


def test_alpha_zero_is_bitwise_identical_and_removal_is_clean(tiny: tuple) -> None:
    model, proc = tiny
    pv, ids, mask = _inputs(proc)
    with torch.no_grad():
        base_logits = model(pv, ids, mask)["logits"]
    base_tokens = model.generate_tokens(pv, ids, mask, 7)
    layer = model.decoder_layers[1]
    n_hooks = len(layer._forward_hooks)
    hook = SteeringHook(model, _direction(model), alpha=0.0).attach()
    assert len(layer._forward_hooks) == n_hooks + 1
    with torch.no_grad():
        assert torch.equal(model(pv, ids, mask)["logits"], base_logits)
    assert torch.equal(model.generate_tokens(pv, ids, mask, 7), base_tokens)
    hook.alpha = 3.0
    with torch.no_grad():
        steered = model(pv, ids, mask)["logits"]
    assert not torch.allclose(steered, base_logits)
    hook.remove()
    assert len(layer._forward_hooks) == n_hooks and not hook.attached
    with torch.no_grad():
        assert torch.equal(model(pv, ids, mask)["logits"], base_logits)


def test_hook_runs_on_prefill_and_every_cached_decode_step(tiny: tuple) -> None:
    model, proc = tiny
    pv, ids, mask = _inputs(proc, 1)
    seen: list[int] = []
    with SteeringHook(model, _direction(model), alpha=1.0) as hook:
        h2 = model.decoder_layers[1].register_forward_hook(
            lambda m, a, o: seen.append((o[0] if isinstance(o, tuple) else o).shape[1])
        )
        model.generate_tokens(pv, ids, mask, 7)
        h2.remove()
        assert hook.calls == 7  # one prefill + six cached single-token steps
    assert seen[0] == ids.shape[1] + model.config.num_patches and seen[1:] == [1] * 6


def test_alpha_changes_between_steps_take_effect(tiny: tuple) -> None:
    model, proc = tiny
    pv, ids, mask = _inputs(proc, 1)
    direction = _direction(model)
    direction.vector *= 50.0 / direction.vector.norm()
    with SteeringHook(model, direction) as hook:
        outs = []
        for alpha in (0.0, 1.0, -1.0, 0.0):
            hook.alpha = alpha
            outs.append(model.generate_tokens(pv, ids, mask, 7))
    assert torch.equal(outs[0], outs[3])
    assert not torch.equal(outs[1], outs[2])


def test_neuron_cluster_overwrites_down_proj_inputs(tiny: tuple) -> None:
    model, proc = tiny
    pv, ids, mask = _inputs(proc, 1)
    cluster = NeuronCluster(
        0, torch.tensor([3, 17, 40]), torch.tensor([1.0, -2.0, 0.5]), "ee_speed"
    )
    captured: list[torch.Tensor] = []
    down = model.decoder_layers[0].mlp.down_proj
    base = model.generate_tokens(pv, ids, mask, 7)
    with SteeringHook(model, cluster, alpha=0.0) as hook:
        assert torch.equal(model.generate_tokens(pv, ids, mask, 7), base)
        hook.alpha = 2.0
        # registered after the steering pre-hook, so it sees the overwritten input
        h = down.register_forward_pre_hook(lambda m, a: captured.append(a[0].detach().clone()))
        model.generate_tokens(pv, ids, mask, 2)
        h.remove()
    torch.testing.assert_close(
        captured[0][0, :, [3, 17, 40]],
        torch.tensor([2.0, -4.0, 1.0]).expand(captured[0].shape[1], 3),
    )
    assert not down._forward_pre_hooks


def test_directions_and_clusters_save_and_load_with_metadata(tmp_path: Path, tiny: tuple) -> None:
    model, _ = tiny
    d = _direction(model)
    d.meta = {"contrast": "fast vs slow", "n_positive": 3}
    d.save(tmp_path / "speed")
    back = load_intervention(tmp_path / "speed.safetensors")
    assert isinstance(back, SteeringDirection)
    assert torch.equal(back.vector, d.vector) and back.layer == 1 and back.concept == "ee_speed"
    assert back.meta == d.meta
    c = NeuronCluster(1, torch.tensor([1, 2]), torch.tensor([0.5, 0.25]), "ee_speed", {"k": 2})
    c.save(tmp_path / "neurons.json")
    c2 = load_intervention(tmp_path / "neurons")
    assert isinstance(c2, NeuronCluster) and c2.neurons.tolist() == [1, 2] and c2.meta == {"k": 2}
    with pytest.raises(CheckpointError, match="not a steering direction"):
        SteeringDirection.load(tmp_path / "neurons")
    with pytest.raises(ConfigError, match="outside the model"):
        SteeringHook(model, SteeringDirection(d.vector, layer=9))
    with pytest.raises(ConfigError, match="hidden size"):
        SteeringHook(model, SteeringDirection(torch.zeros(5), layer=0))
    word = SteeringDirection(d.vector, 0, "ee_speed", {}, site="input", position=4)
    word.save(tmp_path / "word")
    back = SteeringDirection.load(tmp_path / "word")
    assert (back.site, back.position) == ("input", 4)
    meta = json.loads((tmp_path / "speed.json").read_text())
    del meta["site"], meta["position"]  # saved before sites existed
    (tmp_path / "speed.json").write_text(json.dumps(meta))
    assert (SteeringDirection.load(tmp_path / "speed").site, back.layer) == ("output", 0)
    assert SteeringDirection.load(tmp_path / "speed").position is None
    with pytest.raises(ConfigError, match="steering site 'middle'"):
        SteeringDirection(d.vector, 0, site="middle")
    with pytest.raises(ConfigError, match="steering position 0"):
        SteeringDirection(d.vector, 0, position=0)


def test_mean_difference_recovers_a_planted_direction(tiny: tuple) -> None:
    model, proc = tiny
    pv, ids, mask = _inputs(proc, 2)
    acts = collect_activations(model, pv, ids, mask, layer=1, n_last=3)
    assert acts.shape == (2, model.config.llm_dim)
    mlp = collect_activations(model, pv, ids, mask, layer=1, n_last=3, site="mlp")
    assert mlp.shape == (2, model.config.text["intermediate_size"])
    g = torch.Generator().manual_seed(0)
    planted = torch.randn(16, generator=g)
    neg = torch.randn(200, 16, generator=g)
    pos = torch.randn(200, 16, generator=g) + planted
    d = mean_difference(pos, neg, layer=1, concept="x")
    assert torch.nn.functional.cosine_similarity(d.vector, planted, dim=0) > 0.95
    assert d.meta["separation_d"] > 2
    cl = select_neurons(pos, neg, layer=1, k=4)
    assert set(cl.neurons.tolist()) <= set(
        torch.argsort(planted.abs(), descending=True)[:8].tolist()
    )
    with pytest.raises(ConfigError, match="non-empty"):
        mean_difference(pos[:0], neg, layer=1)


def test_policy_alpha_knob_drives_the_hook(tiny: tuple) -> None:
    model, proc = tiny
    policy = OpenVLAPolicy(model, proc, intervention=_direction(model), alpha_limit=2.0)
    assert isinstance(policy, Steerable) and policy.action_dim == 7
    obs = {"image.front": np.zeros((64, 64, 3), np.uint8), "instruction": "reach the red cube"}
    a0 = policy.predict_action_chunk(obs)
    assert a0.shape == (1, 7)
    policy.set_knob("alpha", 1.5)
    assert policy.hook is not None and policy.hook.alpha == 1.5
    with pytest.raises(ConfigError, match="outside"):
        policy.set_knob("alpha", 3.0)
    policy.reset_knobs()
    assert policy.hook.alpha == 0.0
    assert np.array_equal(policy.predict_action_chunk(obs), a0)
    policy.close()
    assert not policy.hook.attached


def test_a_second_hook_on_the_same_model_is_refused_until_the_first_policy_closes(
    tiny: tuple,
) -> None:
    """Regression: ``lab steer dial`` built one policy per method on one model and never closed
    them, so each method's "alpha = 0" still carried the previous method's hook at its last
    alpha (the dial's paired and probe rows at alpha 0 equalled the previous method's alpha 2)."""
    model, proc = tiny
    obs = {"image.front": np.zeros((64, 64, 3), np.uint8), "instruction": "reach the red cube"}
    plain = OpenVLAPolicy(model, proc).predict_action_chunk(obs)
    first = OpenVLAPolicy(model, proc, intervention=_direction(model), alpha_limit=4.0)
    first.set_knob("alpha", 4.0)
    with pytest.raises(ConfigError, match="already has a steering hook") as exc:
        OpenVLAPolicy(model, proc, intervention=_direction(model), alpha_limit=4.0)
    assert "close()" in exc.value.fix
    first.close()
    second = OpenVLAPolicy(model, proc, intervention=_direction(model), alpha_limit=4.0)
    assert np.array_equal(second.predict_action_chunk(obs), plain)  # alpha 0: nothing added
    second.close()
    second.close()  # idempotent
    assert model.__dict__["_steering_hooks"] == []


def test_dial_leaves_no_hook_and_every_method_shares_the_unsteered_point(
    tiny: tuple, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Each method's alpha = 0 row is the same unsteered model: the dial closes each policy."""
    from embodied.apps.lab import steer as lab_steer
    from embodied.apps.lab.config_steer import DialSettings, SteerExperimentConfig

    model, _proc = tiny
    seen: list[int] = []

    def fake_run(env, policy, controller, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(len(model.__dict__.get("_steering_hooks", [])))
        policy.set_knob("alpha", 2.0)  # leave the knob where the last alpha of a sweep does
        return {"episodes": [{"success": True, "mean_concept": 0.1, "scene": 0}]}

    monkeypatch.setattr(lab_steer, "run_episodes", fake_run)
    monkeypatch.setattr(lab_steer, "extract_direction", lambda m, *a, **k: _direction(m))
    monkeypatch.setattr(lab_steer, "collect_graded_demonstrations", lambda *a, **k: None)
    monkeypatch.setattr(lab_steer, "load_pretrained", lambda *a, **k: tiny)
    monkeypatch.setattr(lab_steer, "plot_dose_response", lambda *a, **k: None)
    out = tmp_path / "dial"
    (out / "vla").mkdir(parents=True)
    (out / "vla" / "config.json").write_text("{}")  # "trained": reuse (load_pretrained above)
    settings = DialSettings(
        methods=("mean_difference", "probe"), alphas=(0.0, 1.0), episodes=1, demonstrations=2
    )
    lab_steer.dial_experiment(out, SteerExperimentConfig(layout="fixed"), settings)
    assert seen == [1, 1, 1, 1]  # each run sees its own hook only
    assert model.__dict__.get("_steering_hooks", []) == []


def test_instruction_suffix_names_the_nominal_speed(
    tiny: tuple, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, proc = tiny
    obs = {"image.front": np.zeros((64, 64, 3), np.uint8), "instruction": "reach the red cube"}
    seen: list[list[str]] = []
    encode = proc.encode_prompts

    def spy(texts, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(list(texts))
        return encode(texts, *args, **kwargs)

    monkeypatch.setattr(proc, "encode_prompts", spy)
    OpenVLAPolicy(model, proc).predict_action_chunk(obs)
    OpenVLAPolicy(model, proc, instruction_suffix=" at speed 5 ").predict_action_chunk(obs)
    assert seen == [["reach the red cube"], ["reach the red cube at speed 5"]]
