"""CTRL-STEER measured fairly (issue #15): disjoint seeds, alpha* and the Häon constant tuned on
the tuning seeds only, Häon et al.'s value-vector neurons and constant hook, the five-row report."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import controllers
import embodied.apps.lab.steer as steer
from embodied.apps.lab.steer import (
    ExperimentSettings,
    best_fixed,
    check_disjoint_seeds,
    run_experiment,
    summarize,
)
from embodied.apps.lab.steer_report import markdown_table
from embodied.errors import ConfigError
from policies.openvla.steering import (
    ValueVectorHook,
    ValueVectorNeurons,
    ffn_value_vectors,
    select_value_vector_neurons,
)

# ---------------------------------------------------------------------------------------------
# seeds
# ---------------------------------------------------------------------------------------------


def test_default_seed_ranges_are_disjoint_and_overlaps_are_refused() -> None:
    s = ExperimentSettings()
    ranges = s.seed_ranges((0, 48))
    check_disjoint_seeds(ranges)  # the defaults are the fair protocol
    assert ranges["evaluation"] == (s.seed, s.seed + s.episodes)
    assert ranges["tuning"] == (s.tuning_seed, s.tuning_seed + s.sweep_episodes)
    with pytest.raises(ConfigError, match="overlap"):
        check_disjoint_seeds({"tuning": (10, 20), "evaluation": (19, 30)})
    with pytest.raises(ConfigError, match="training seeds"):
        check_disjoint_seeds(ExperimentSettings(tuning_seed=0).seed_ranges((0, 48)))
    check_disjoint_seeds({"a": (0, 10), "b": (10, 20), "empty": (5, 5)})


def test_run_experiment_refuses_overlapping_seeds_before_any_rollout(tmp_path: Path) -> None:
    s = ExperimentSettings(seed=100, tuning_seed=95, sweep_episodes=10, rl_timesteps=0)
    with pytest.raises(ConfigError, match="tuning seeds .* overlap evaluation"):
        run_experiment(None, None, s, tmp_path)  # type: ignore[arg-type]


def test_best_fixed_is_closest_mean_concept_ties_to_smaller_magnitude() -> None:
    pts = [(-2.0, 0.25), (-1.0, 0.75), (0.0, 1.0)]  # exact binary fractions: a true tie
    sweep: list[dict[str, Any]] = [{"alpha": a, "summary": {"mean_concept": v}} for a, v in pts]
    assert best_fixed(sweep, 0.5) == -1.0  # both 0.25 away: the smaller |alpha|
    sweep[0]["summary"]["mean_concept"] = 0.375
    assert best_fixed(sweep, 0.5) == -2.0
    with pytest.raises(ConfigError):
        best_fixed([{"alpha": 0, "summary": {"mean_concept": math.nan}}], 0.06)


# ---------------------------------------------------------------------------------------------
# the experiment with fake rollouts: alpha* and the Häon constant come from the tuning seeds only
# ---------------------------------------------------------------------------------------------


class _Env:
    control_rate_hz = 20.0
    max_episode_steps = 10


def _episodes(n: int, first: int, speed: float, success: bool) -> list[dict[str, Any]]:
    return [
        {
            "seed": first + k,
            "success": success if k % 2 == 0 else not success,
            "steps": 10,
            "rmse": abs(speed - 0.06) + 0.001 * k,
            "mean_concept": speed,
            "measured": [speed] * 10,
            "alpha": [0.0] * 10,
            "overshoot_pct": 0.0,
            "settling_time_s": 0.2,
        }
        for k in range(n)
    ]


def test_alpha_star_and_haeon_constant_are_chosen_on_tuning_seeds_only(
    tiny: tuple, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, _ = tiny
    s = ExperimentSettings(
        episodes=4,
        seed=1000,
        tuning_seed=500,
        sweep_alphas=(-2.0, -1.0, 0.0),
        sweep_episodes=3,
        haeon_coefs=(0.5, 1.0, 2.0),
        rl_timesteps=256,
    )
    hook = ValueVectorHook(model, ValueVectorNeurons(torch.tensor([[0, 1], [1, 2]])))
    calls: list[tuple[str, int | None, int]] = []

    def fake(env, policy, controller, settings, n, label, log=None, first_seed=None):  # type: ignore[no-untyped-def]
        calls.append((label, first_seed, n))
        tuning = first_seed == settings.tuning_seed
        if controller is not None and hasattr(controller, "value"):
            a = controller.value  # on tuning seeds alpha=-1 is on target, on eval alpha=-2 would be
            speed = {-2.0: 0.04, -1.0: 0.06, 0.0: 0.1}[a] if tuning else {-2.0: 0.06}.get(a, 0.2)
        elif controller is None and hook.attached:
            c = hook.coef
            speed = {0.5: 0.09, 1.0: 0.08, 2.0: 0.061}[c] if tuning else {0.5: 0.06}.get(c, 0.2)
        else:
            speed = 0.1
        eps = _episodes(n, first_seed or settings.seed, speed, True)
        return {"label": label, "summary": summarize(eps), "episodes": eps}

    monkeypatch.setattr(steer, "run_episodes", fake)
    monkeypatch.setattr(steer, "train_rl", lambda *a, **k: controllers.make("fixed", value=-0.5))
    report = run_experiment(_Env(), None, s, tmp_path, haeon=hook)  # type: ignore[arg-type]
    assert report["alpha_star"] == -1.0 and report["haeon_coef_star"] == 2.0
    tuning = [c for c in calls if c[0].startswith("tune")]
    assert len(tuning) == 6 and all(c[1] == 500 and c[2] == 3 for c in tuning)
    evaluation = [c for c in calls if not c[0].startswith("tune")]
    assert all(c[1] is None and c[2] == 4 for c in evaluation)  # None = settings.seed
    b = report["budgets"]
    assert b["fixed_alpha_tuning_rollouts"] == b["haeon_tuning_rollouts"] == 9
    assert report["seeds"] == {
        "training": [0, 0],
        "tuning": [500, 503],
        "rl_training": [1_000_000, 1_000_256],
        "evaluation": [1000, 1004],
    }
    # five rows, each with a Wilson interval and an RMSE interval, in json, markdown and plot
    names = [r["controller"] for r in report["rows"]]
    assert names == ["none", "fixed alpha*=-1", "haeon c*=2", "pid", "rl (ppo, 256 steps)"]
    for r in report["rows"]:
        lo, hi = r["success_ci"]
        assert 0 <= lo <= r["success_rate"] <= hi <= 1 and r["episodes"] == 4
        assert r["rmse_ci"][0] <= r["rmse"] <= r["rmse_ci"][1]
    md = (tmp_path / "results.md").read_text()
    assert md == markdown_table(report)
    for name in names:
        assert f"| {name} |" in md
    assert "| 0.50 (2/4) | [0.15, 0.85] |" in md  # Wilson 95% of 2/4
    assert (tmp_path / "success_vs_rmse.png").stat().st_size > 0
    assert not hook.attached
    assert torch.is_grad_enabled()  # the experiment restores the caller's autograd mode


def test_ppo_setpoints_are_the_targets_or_the_sweeps_working_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``rl_setpoint_range``: ``targets`` trains PPO on 0.7x-1.3x the setpoints (the earlier
    rule); ``working_range`` on the mean concepts of the sweep points that keep the success
    floor around alpha = 0, widened to hold every setpoint; it is refused without a sweep."""
    # alpha -> (mean speed, success rate) on the tuning seeds: -2 and 1 lose success
    dial = {
        -2.0: (0.02, 0.2),
        -1.0: (0.05, 1.0),
        0.0: (0.1, 1.0),
        0.5: (0.13, 1.0),
        1.0: (0.2, 0.0),
    }
    sweep = [
        {"alpha": a, "summary": {"mean_concept": v, "success_rate": p}}
        for a, (v, p) in dial.items()
    ]
    s = ExperimentSettings(setpoints=(0.06, 0.1, 0.14), sweep_alphas=tuple(dial), haeon_coefs=())
    assert steer.rl_setpoint_range(s) == pytest.approx((0.042, 0.182))
    w = replace(s, rl_setpoint_range="working_range")
    assert steer.rl_setpoint_range(w, sweep, 0.9) == pytest.approx((0.05, 0.14))
    with pytest.raises(ConfigError, match="rl-setpoint-range targets"):
        steer.rl_setpoint_range(w, [], None)
    with pytest.raises(ConfigError, match="rl_setpoint_range"):
        ExperimentSettings(rl_setpoint_range="everything")

    # run_experiment hands PPO the range its tuning sweep gives
    def fake(env, policy, controller, settings, n, label, log=None, first_seed=None):  # type: ignore[no-untyped-def]
        v, p = dial[controller.value] if hasattr(controller, "value") else (0.1, 1.0)
        eps = _episodes(n, first_seed or settings.seed, v, True)
        for k, e in enumerate(eps):
            e["success"] = k < round(p * n)
        return {"label": label, "summary": summarize(eps), "episodes": eps}

    got: list[Any] = []

    def fake_rl(*args: Any, **kwargs: Any) -> Any:
        got.append(args[5])
        return controllers.make("fixed", value=0.0)

    monkeypatch.setattr(steer, "run_episodes", fake)
    monkeypatch.setattr(steer, "train_rl", fake_rl)
    w = replace(w, episodes=2, seed=1000, tuning_seed=500, sweep_episodes=5)
    w = replace(w, expert_reference=False, rl_timesteps=64)
    run_experiment(_Env(), None, w, tmp_path)  # type: ignore[arg-type]
    assert got == [pytest.approx((0.05, 0.14))]


def test_ppo_reward_weight_and_exploration_noise_reach_the_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``rl_error_weight`` becomes the reward's error weight of the controller PPO trains, and
    ``rl_log_std_init`` the initial exploration noise and ``rl_train_seed`` PPO's own seed; the
    defaults are the earlier ones."""
    import policies
    import sim

    got: list[Any] = []

    def fake_train(senv: Any, training: Any, save_to: Any = None) -> tuple[Any, None]:
        got.append((senv.config, training))
        return controllers.make("fixed", value=0.0), None

    monkeypatch.setattr(steer, "train_rl_controller", fake_train)
    env = sim.make("mujoco:reach_around")
    policy = policies.load("expert_speed_knob", env=env)
    base = ExperimentSettings(alpha_limit=1.0, rl_timesteps=64, sweep_alphas=(), haeon_coefs=())
    changed = replace(base, rl_error_weight=5.0, rl_log_std_init=-1.5, rl_train_seed=7)
    for s in (base, changed):
        steer.train_rl(env, policy, s, tmp_path / "rl", setpoints=(0.05, 0.1))
    (c0, t0), (c1, t1) = got
    assert (c0.error_weight, t0.log_std_init, t0.seed) == (1.0, -0.5, 0)
    assert (c1.error_weight, t1.log_std_init, t1.seed) == (5.0, -1.5, 7)
    assert c1.setpoint_low == 0.05 and t1.total_timesteps == 64
    with pytest.raises(ConfigError, match="rl_error_weight"):
        ExperimentSettings(rl_error_weight=0.0)


def test_budget_mismatch_between_sweep_and_haeon_is_refused() -> None:
    with pytest.raises(ConfigError, match="same tuning budget"):
        ExperimentSettings(sweep_alphas=(-1.0, 0.0), haeon_coefs=(1.0,))
    ExperimentSettings(sweep_alphas=(-1.0, 0.0), haeon_coefs=())  # no Häon row: fine


# ---------------------------------------------------------------------------------------------
# Häon et al. 2025: value-vector projection and the constant hook
# ---------------------------------------------------------------------------------------------


def test_value_vectors_are_down_proj_of_one_hot_as_the_reference(tiny: tuple) -> None:
    model, _ = tiny
    layers = model.decoder_layers
    inter = layers[0].mlp.down_proj.in_features
    with torch.no_grad():
        ref = torch.cat([lay.mlp.down_proj(torch.eye(inter)) for lay in layers], 0)
    assert torch.allclose(ffn_value_vectors(model), ref, atol=1e-6)


def test_selection_matches_a_hand_computed_vocabulary_projection(tiny: tuple) -> None:
    model, _ = tiny
    W_U = model.language_model.lm_head.weight.detach().float()  # (vocab, hidden)
    token = 40
    hand = []  # (score, layer, neuron) of every value vector with `token` in its top-5 tokens
    for lay, layer in enumerate(model.decoder_layers):
        w = layer.mlp.down_proj.weight.detach().float()
        for i in range(w.shape[1]):
            logits = W_U @ w[:, i]
            if token in torch.topk(logits, 5).indices.tolist():
                hand.append((float(logits[token]), lay, i))
    assert hand, "pick a token some value vector promotes"
    hand.sort(reverse=True)
    sel = select_value_vector_neurons(model, [token], n=3, top_k=5, coef=2.5, concept="slowly")
    assert sel.neurons.tolist() == [[lay, i] for _, lay, i in hand[:3]]
    assert sel.meta["n_candidates"] == len(hand) and sel.coef == 2.5
    assert sel.meta["scores"] == pytest.approx([h[0] for h in hand[:3]], rel=1e-5)
    inter = model.decoder_layers[0].mlp.down_proj.in_features
    assert sel.meta["flat_indices"] == sel.flat_indices(inter)
    with pytest.raises(ConfigError, match="top 1 tokens"):
        never = torch.topk(W_U @ ffn_value_vectors(model).t(), 1, dim=0).indices.flatten()
        unused = sorted(set(range(W_U.shape[0])) - set(never.tolist()))[0]
        select_value_vector_neurons(model, [unused], top_k=1)


def test_constant_hook_sets_exactly_the_selected_activations(tiny: tuple, tmp_path: Path) -> None:
    model, proc = tiny
    import numpy as np

    img = np.random.default_rng(0).integers(0, 255, (1, 64, 64, 3), dtype=np.uint8)
    ids, mask = proc.encode_prompts(["reach the red cube"])
    pv = proc.images(img)
    layers = model.decoder_layers
    seen: dict[int, list[torch.Tensor]] = {0: [], 1: []}
    grabs = [
        layers[k].mlp.down_proj.register_forward_pre_hook(
            lambda m, a, k=k: seen[k].append(a[0].detach().clone())
        )
        for k in (0, 1)
    ]
    try:
        with torch.no_grad():
            base = model(pv, ids, mask)["logits"]
        plain = [seen[k].pop() for k in (0, 1)]
        vv = ValueVectorNeurons(torch.tensor([[1, 3], [0, 5], [1, 7]]), coef=1.75)
        for g in grabs:  # the setter must run before the grabbers
            g.remove()
        hook = ValueVectorHook(model, vv).attach()
        grabs = [
            layers[k].mlp.down_proj.register_forward_pre_hook(
                lambda m, a, k=k: seen[k].append(a[0].detach().clone())
            )
            for k in (0, 1)
        ]
        with torch.no_grad():
            steered = model(pv, ids, mask)["logits"]
        x0, x1 = seen[0].pop(), seen[1].pop()
        # layer 0: neuron 5 at every position is the constant, every other activation as before
        assert torch.all(x0[..., 5] == 1.75)
        keep = torch.ones(x0.shape[-1], dtype=torch.bool)
        keep[5] = False
        assert torch.equal(x0[..., keep], plain[0][..., keep])
        # layer 1: neurons 3 and 7 are the constant everywhere
        assert torch.all(x1[..., [3, 7]] == 1.75)
        assert not torch.allclose(steered, base)
        # every cached decode step is set too
        seen[1].clear()
        model.generate_tokens(pv, ids, mask, 3)
        assert len(seen[1]) >= 3 and all(torch.all(x[..., [3, 7]] == 1.75) for x in seen[1])
        hook.coef = -0.5
        with torch.no_grad():
            model(pv, ids, mask)
        assert torch.all(seen[1][-1][..., [3, 7]] == -0.5)
        hook.remove()
        with torch.no_grad():
            assert torch.equal(model(pv, ids, mask)["logits"], base)
    finally:
        for g in grabs:
            g.remove()
    # round trip and bounds
    vv.save(tmp_path / "vv")
    back = ValueVectorNeurons.load(tmp_path / "vv")
    assert back.neurons.tolist() == vv.neurons.tolist() and back.coef == 1.75
    assert back.layers == {1: [3, 7], 0: [5]}
    with pytest.raises(ConfigError, match="outside"):
        ValueVectorHook(model, ValueVectorNeurons(torch.tensor([[9, 0]])))


# ---------------------------------------------------------------------------------------------
# issue #36: three setpoints, alpha* with success as a constraint, PID on the working range
# ---------------------------------------------------------------------------------------------


def test_three_setpoints_choose_alpha_star_each_and_a_setpoint_change_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dial (speed 0.1 + 0.04 alpha, success held for |alpha| <= 1) whose alpha = -2 point
    stalls the arm: the slow setpoint's alpha* must not be the stall, PID's gain comes from
    the working range, and the change row steps its setpoint from the lowest to the highest."""
    dial = {-2.0: (0.02, False), -1.0: (0.06, True), 0.0: (0.1, True), 1.0: (0.14, True)}
    s = ExperimentSettings(
        episodes=2, seed=1000, tuning_seed=500, sweep_alphas=tuple(dial), sweep_episodes=2,
        haeon_coefs=(), rl_timesteps=0, setpoints=(0.03, 0.1, 0.14), setpoint_change_s=0.2,
    )  # fmt: skip
    seen: list[tuple[str, float, Any]] = []

    def fake(env, policy, controller, settings, n, label, log=None, first_seed=None, setpoint=None):  # type: ignore[no-untyped-def]
        seen.append((label, settings.setpoint, setpoint))
        a = getattr(controller, "value", 0.0)
        speed, ok = dial.get(a, (0.1, True))
        eps = _episodes(n, first_seed or settings.seed, speed, ok)
        for e in eps:
            e["success"] = ok
        return {"label": label, "summary": summarize(eps), "episodes": eps}

    monkeypatch.setattr(steer, "run_episodes", fake)
    report = run_experiment(_Env(), None, s, tmp_path)  # type: ignore[arg-type]
    # 0.03 is closest to the stalled -2 (0.02): success rules it out, -1 (0.06) is alpha*
    assert report["alpha_stars"] == {"0.03": -1.0, "0.1": 0.0, "0.14": 1.0}
    assert report["pid_fit"] == {
        "fit": "working_range",
        "fit_alphas": [-1.0, 0.0, 1.0],
        "feedforward": "static",
    }
    assert report["static_gain_per_alpha"] == pytest.approx(0.04)
    names = [r["controller"] for r in report["rows"]]
    assert names[:3] == ["sp=0.03 none", "sp=0.03 fixed alpha*=-1", "sp=0.03 pid"]
    assert len(names) == 3 * 3 + 1 and names[-1] == "pid, 0.03->0.14 m/s at 0.2 s"
    assert [r["setpoint"] for r in report["rows"][:3]] == [0.03] * 3
    # the sweep's logged RMSE is against a setpoint of the run, not the 0.06 m/s default
    assert {sp for label, sp, _ in seen if label.startswith("tune")} == {0.03}
    assert report["sweep_setpoint"] == 0.03
    change = seen[-1][2]
    assert change(0.0) == 0.03 and change(0.19) == 0.03 and change(0.2) == 0.14
    assert "0.03, 0.1, 0.14 m/s" in (tmp_path / "results.md").read_text()
    assert (tmp_path / "speed_alpha.png").stat().st_size > 0


def test_a_saved_rl_controller_is_evaluated_without_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--rl-controller``: an earlier run's PPO controller gets its rows (named by the
    timesteps it was trained for) with no PPO training; one with another knob range is
    refused with the fix."""
    from controllers.rl import MLPActor, RLController, RLControllerConfig

    state = {
        "hidden.0.weight": np.zeros((1, 6), dtype=np.float32),
        "hidden.0.bias": np.zeros(1, dtype=np.float32),
        "out.weight": np.ones((1, 1), dtype=np.float32),
        "out.bias": np.zeros(1, dtype=np.float32),
    }
    cfg = RLControllerConfig(
        observe_setpoint=True, hidden_sizes=(1,), output_min=-2.0, output_max=2.0
    )
    folder = RLController(cfg, MLPActor(state, 6), meta={"total_timesteps": 1234}).save_pretrained(
        tmp_path / "rl"
    )
    s = ExperimentSettings(
        episodes=2, seed=1000, tuning_seed=500, sweep_alphas=(-1.0, 0.0, 1.0), sweep_episodes=2,
        alpha_limit=2.0, haeon_coefs=(), rl_timesteps=50_000, rl_controller=folder,
        setpoints=(0.06, 0.14), setpoint_change_s=0.2,
    )  # fmt: skip
    used: list[tuple[str, Any]] = []

    def fake(env, policy, controller, settings, n, label, log=None, first_seed=None, setpoint=None):  # type: ignore[no-untyped-def]
        used.append((label, controller))
        eps = _episodes(n, first_seed or settings.seed, 0.1, True)
        return {"label": label, "summary": summarize(eps), "episodes": eps}

    monkeypatch.setattr(steer, "run_episodes", fake)
    monkeypatch.setattr(steer, "train_rl", lambda *a, **k: pytest.fail("trained PPO"))
    report = run_experiment(_Env(), None, s, tmp_path / "run")  # type: ignore[arg-type]
    rl_rows = [(label, c) for label, c in used if "rl" in label.split(",")[0].split()]
    assert [label for label, _ in rl_rows] == [
        "sp=0.06 rl (ppo, 1234 steps)",
        "sp=0.14 rl (ppo, 1234 steps)",
        "rl, 0.06->0.14 m/s at 0.2 s",
    ]
    assert all(isinstance(c, RLController) and c.config.observe_setpoint for _, c in rl_rows)
    assert report["budgets"]["rl_training_timesteps"] == 1234
    saved = json.loads((tmp_path / "run" / "results.json").read_text())["rl_controller"]
    assert saved["config"]["observe_setpoint"] is True and saved["meta"] == {
        "total_timesteps": 1234
    }
    with pytest.raises(
        ConfigError, match=r"rl_controller=.*not \+/- alpha_limit=4.*--alpha-limit 2"
    ):
        run_experiment(_Env(), None, replace(s, alpha_limit=4.0), tmp_path / "run2")  # type: ignore[arg-type]


def test_pid_gain_fit_on_the_working_range_or_the_half_range() -> None:
    sweep: list[dict[str, Any]] = [
        {"alpha": a, "summary": {"mean_concept": v, "success_rate": ok}}
        for a, v, ok in ((-2.0, 0.0, 0.1), (-1.0, 0.14, 1.0), (0.0, 0.1, 1.0), (1.0, 0.06, 1.0))
    ]  # a reversed dial: positive alpha slows the arm; -2 stalls it
    cfg = steer.pid_from_sweep(sweep, ExperimentSettings(), min_success=0.9)
    assert cfg["static_gain"] == pytest.approx(-0.04) and cfg["direction"] == -1
    assert cfg["kp"] == pytest.approx(0.2 / 0.04) and cfg["fit_alphas"] == [-1.0, 0.0, 1.0]
    controllers.make(
        "pid",
        **{
            k: v
            for k, v in cfg.items()
            if k not in ("static_gain", "fit", "fit_alphas", "feedforward")
        },
    )
    # the line v = 0.1 - 0.04 alpha inverted: each setpoint starts from its alpha on the line
    assert cfg["bias"] + cfg["kff"] * 0.14 == pytest.approx(-1.0)
    assert cfg["bias"] + cfg["kff"] * 0.06 == pytest.approx(1.0)
    plain = steer.pid_from_sweep(sweep, ExperimentSettings(pid_feedforward="none"), 0.9)
    assert "bias" not in plain and "kff" not in plain and plain["kp"] == cfg["kp"]
    assert plain["feedforward"] == "none" and cfg["feedforward"] == "static"
    old = steer.pid_from_sweep(sweep, ExperimentSettings(pid_fit="half_range"), min_success=0.9)
    assert old["fit_alphas"] == [-2.0, -1.0, 0.0, 1.0]  # the earlier rule fits through the stall
    with pytest.raises(ConfigError, match="pid_fit"):
        ExperimentSettings(pid_fit="cliff")
    with pytest.raises(ConfigError, match="setpoints"):
        ExperimentSettings(setpoints=(0.1, -0.2))


def test_the_sweep_feedforward_inverts_the_points_where_the_dial_bends() -> None:
    """``--pid-feedforward sweep``: each setpoint starts from the alpha interpolated between the
    sweep points (the line would put a setpoint on the bent top at the wrong alpha); a sweep
    whose speeds are not monotone in alpha falls back to the line, and says so."""
    bent = [(-0.5, 0.04), (-0.25, 0.09), (0.0, 0.13), (0.25, 0.166), (0.5, 0.182)]
    sweep: list[dict[str, Any]] = [
        {"alpha": a, "summary": {"mean_concept": v, "success_rate": 1.0}} for a, v in bent
    ]
    settings = ExperimentSettings(pid_feedforward="sweep")
    cfg = steer.pid_from_sweep(sweep, settings, min_success=0.9)
    assert cfg["feedforward"] == "sweep" and "bias" not in cfg
    pid = controllers.make(
        "pid",
        **{
            k: v
            for k, v in cfg.items()
            if k not in ("static_gain", "fit", "fit_alphas", "feedforward")
        },
    )
    # zero error: the output is the feedforward alone, the sweep's own alpha at each point
    for alpha, speed in bent:
        pid.reset()
        assert pid.update(speed, speed, 1.0) == pytest.approx(alpha)
    pid.reset()
    assert pid.update(0.174, 0.174, 1.0) == pytest.approx(0.375)  # halfway up the bend
    line = steer.pid_from_sweep(sweep, replace(settings, pid_feedforward="static"), 0.9)
    # the line starts 0.166 m/s past the alpha measured for it, where the dial runs faster
    assert line["bias"] + line["kff"] * 0.166 > 0.25 + 0.05
    assert cfg["setpoint_tau_s"] == 0.2  # the default: the feedback expects the arm's rise
    one_dof = steer.pid_from_sweep(sweep, replace(settings, pid_reference_tau_s=0.0), 0.9)
    assert "setpoint_tau_s" not in one_dof
    wobbly = [*sweep[:-1], {"alpha": 0.5, "summary": {"mean_concept": 0.15, "success_rate": 1.0}}]
    fallback = steer.pid_from_sweep(wobbly, settings, min_success=0.9)
    assert fallback["feedforward"] == "static" and "feedforward_table" not in fallback


def _reference_on_arm_reach(settings: ExperimentSettings, sp: float) -> dict[str, Any]:
    """The expert-at-setpoint row of ``sp`` on the jittered arm_reach layout (``settings``'
    reset options added to the layout's)."""
    from embodied.apps.training.training_vla import steer_env

    env, reset, _ = steer_env("mujoco:arm_reach", 32, "jittered", 0.01)
    try:
        s = replace(settings, reset_options={**reset, **settings.reset_options})
        expert = steer._expert_at(env, s, sp)
        assert expert is not None
        return steer._run_reference(env, expert, s, sp, "expert at setpoint", lambda *_: None)
    finally:
        env.close()


def test_the_expert_at_the_setpoint_is_the_reference_row_and_its_steady_error_is_small() -> None:
    """The reference row drives the real arm_reach expert at the setpoint: over the whole episode
    its RMSE is well above 10 % of the setpoint (the rise from rest), once the transient is
    left out it is not, so the steady-state figure measures tracking and not the start."""
    s = ExperimentSettings(episodes=2, seed=10_000)
    r = _reference_on_arm_reach(s, 0.1)
    summary = r["summary"]
    assert r["reference"] and r["setpoint"] == 0.1 and summary["successes"] == 2
    assert summary["rmse"] > 0.1 * 0.1
    assert summary["rmse_steady"] < 0.1 * 0.1 < summary["rmse"]
    assert summary["rmse_steady_ci"][0] <= summary["rmse_steady"] <= summary["rmse_steady_ci"][1]
    assert abs(summary["mean_concept"] - 0.1) < 0.02
    assert steer._expert_at(_Env(), s, 0.1) is None  # an env without an expert gets no row


def test_the_height_reference_row_cruises_at_the_setpoint_height() -> None:
    """The height concept's reference: the level expert at the setpoint's cruise height, the
    height measured away from the target (NaN over it, left out of the figures), a steady error
    of a few mm; a VLA trained on another concept than the one tracked is refused."""
    from embodied.apps.lab.config_steer import SteerExperimentConfig

    s = ExperimentSettings(
        episodes=3, seed=10_000, reset_options=steer.concept_reset("height"), concept="height",
        reference_expert={"approach": "level", "speed": 0.1},
    )  # fmt: skip
    r = _reference_on_arm_reach(s, 0.11)
    summary = r["summary"]
    assert summary["successes"] == 3
    # it sinks from the 0.15 m start to 0.11 m: the transient is in the whole-episode RMSE only
    assert summary["rmse_steady"] < 0.005 < summary["rmse"]
    assert abs(summary["mean_concept"] - 0.11) < 0.01
    assert all(np.isnan(e["measured"][-1]) for e in r["episodes"])  # over the target
    assert all(np.isfinite(e["overshoot_pct"]) for e in r["episodes"])  # a 0.04 m step
    # a setpoint at the start height makes no step: no overshoot, not a division by ~1e-17
    at_start = _reference_on_arm_reach(replace(s, episodes=1), 0.15)
    assert math.isnan(at_start["episodes"][0]["overshoot_pct"])
    assert math.isnan(at_start["summary"]["overshoot_pct"])
    with pytest.raises(ConfigError, match="tracks concept 'height'.*vary 'speed'"):
        steer.steer_experiment(Path("unused"), SteerExperimentConfig(), s)


def test_rescore_adds_the_steady_state_rmse_from_the_saved_traces(tmp_path: Path) -> None:
    eps = _episodes(3, 1000, 0.06, True)
    for e in eps:  # rises from rest over 4 samples (0.2 s at 20 Hz), then 0.01 above the setpoint
        e["measured"] = [0.0, 0.02, 0.04, 0.05] + [0.07] * 6
    old_summary = summarize(eps)
    assert math.isnan(old_summary["rmse_steady"])  # a run from before the steady-state figure
    report = {
        "settings": {**dataclasses.asdict(ExperimentSettings(episodes=3)), "stale_key": 1},
        "rows": [{"controller": "none", "setpoint": 0.06, **old_summary}],
        "traces": {"none": eps},
    }
    new = steer.rescore(report, 20.0, transient_s=0.2)
    assert new["rows"][0]["rmse_steady"] == pytest.approx(0.01)
    assert new["settings"]["steady_transient_s"] == 0.2 and "stale_key" not in new["settings"]
    assert math.isnan(report["rows"][0]["rmse_steady"]) and "rmse_steady" not in eps[0]  # untouched
    assert "| 0.0100 |" in markdown_table(new) and "16.7 |" in markdown_table(new)
    # a run from before the height concept named the trace and its mean by speed
    legacy = copy.deepcopy(report)
    for e in legacy["traces"]["none"]:
        e["speed"], e["mean_speed"] = e.pop("measured"), e.pop("mean_concept")
    again = steer.rescore(legacy, 20.0, transient_s=0.2)
    assert again["rows"][0]["rmse_steady"] == pytest.approx(0.01)
    assert again["rows"][0]["mean_concept"] == pytest.approx(new["rows"][0]["mean_concept"])

    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").write_text(json.dumps(report))
    from typer.testing import CliRunner

    from embodied.apps.cli import app

    result = CliRunner().invoke(
        app,
        [
            "lab",
            "steer",
            "rescore",
            str(run),
            "--no-expert-reference",
            "--steady-transient-s",
            "0.2",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads((run / "rescored" / "results.json").read_text())["rows"][0][
        "rmse_steady"
    ] == pytest.approx(0.01)
    assert sorted(p.name for p in run.iterdir()) == ["rescored", "results.json"]


def test_rescore_adds_the_expert_reference_row_before_its_setpoints_rows(tmp_path: Path) -> None:
    from embodied.apps.training.training_vla import steer_env

    eps = _episodes(1, 10_000, 0.1, True)
    report = {
        "settings": dataclasses.asdict(ExperimentSettings(setpoint=0.1, episodes=1)),
        "rows": [{"controller": "none", "setpoint": 0.1, **summarize(eps)}],
        "traces": {"none": eps},
    }
    env, reset, _ = steer_env("mujoco:arm_reach", 32, "jittered", 0.01)
    report["settings"]["reset_options"] = reset
    try:
        new = steer.rescore(report, env.control_rate_hz, 0.5, env)
        again = steer.rescore(new, env.control_rate_hz, 0.5, env)
    finally:
        env.close()
    assert [r["controller"] for r in new["rows"]] == ["expert at setpoint", "none"]
    assert list(new["traces"]) == ["expert at setpoint", "none"]  # plots pair them by position
    ref = new["rows"][0]
    assert ref["reference"] and ref["successes"] == 1 and abs(ref["mean_concept"] - 0.1) < 0.02
    assert [r["controller"] for r in again["rows"]] == ["expert at setpoint", "none"]  # once


def test_release_outside_concept_rests_alpha_over_the_target_in_rows_and_ppo_training() -> None:
    """``release_outside_concept``: where the height is undefined (over the target) every
    controller row commands alpha 0, and PPO's training env hands the agent only the steps
    where the height is measured; without it the fixed alpha stays on throughout."""
    import policies
    import sim

    env = sim.make("mujoco:arm_reach", image_size=32)
    policy = policies.load("expert_speed_knob", env=env)
    reset = steer.concept_reset("height")
    for release in (False, True):
        s = ExperimentSettings(
            concept="height", setpoint=0.15, reset_options=reset, expert_reference=False,
            release_outside_concept=release, sweep_alphas=(), haeon_coefs=(),
        )  # fmt: skip
        ep = steer.run_episodes(env, policy, controllers.make("fixed", value=0.3), s, 1, "x")
        e = ep["episodes"][0]
        measured, alpha = np.array(e["measured"]), np.array(e["alpha"])
        over = np.isnan(measured)
        assert e["success"] and over.any() and (~over).any()
        assert np.allclose(alpha[~over], 0.3)
        assert np.allclose(alpha[over], 0.0 if release else 0.3)
    senv = steer.SeededSteeringEnv(
        env, policy, steer.measure(s), steer.RLControllerConfig(output_min=-0.5, output_max=0.5),
        reset_options=reset, seeds=(0, 10), rest=0.0,
    )  # fmt: skip
    senv.reset(options={"setpoint": 0.15})
    agent_steps, done = 0, False
    while not done:
        _, _, terminated, truncated, _ = senv.step(np.array([0.2], dtype=np.float32))
        agent_steps += 1
        done = terminated or truncated
    inner = senv.last_episode
    assert agent_steps == int(np.isfinite(inner.measurements).sum())
    assert np.allclose(inner.knobs["alpha"][np.isnan(inner.measurements), 0], 0.0)
    env.close()
