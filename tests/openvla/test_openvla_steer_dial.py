"""Is steering a dial (issue #36): graded demonstrations on distinct scenes, the three direction
extraction methods on a tiny model, the contrast by episodes, the dial check, and alpha* chosen
with success as a constraint."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.nn.utils import parametrize

import policies
import sim
from embodied.apps.lab.config_steer import (
    CONTINUUM_WORDS,
    SITES,
    DialSettings,
    ExperimentSettings,
    SteerExperimentConfig,
)
from embodied.apps.lab.steer import best_fixed, dial_markdown, run_episodes, steer_env
from embodied.apps.lab.steer_dial import (
    _activations,
    base_instruction,
    check_dial,
    collect_graded_demonstrations,
    continuum_word,
    episode_contrast,
    extract_direction,
    extreme_prompts,
    ridge_probe,
    speed_named,
    speed_prompt,
    word_position,
)
from embodied.errors import ConfigError
from embodied.loop import rollout
from policies.openvla.steering import STEERING_SITES, SteeringHook
from policies.openvla.training_openvla import (
    BCSettings,
    DemonstrationSteps,
    build_tiny_vla,
    ordinal_token_ids,
    train_bc,
)

# ---------------------------------------------------------------------------------------------
# prompts and contrast sets
# ---------------------------------------------------------------------------------------------


def test_prompts_name_the_speed_as_asked_and_strip_back() -> None:
    rng = (0.04, 0.25)
    assert speed_prompt("reach the red cube", 0.1, "none", rng) == "reach the red cube"
    assert continuum_word(0.04, rng) == "at speed 1"
    assert continuum_word(0.25, rng) == "at speed 9"  # the top edge is the last word
    words = [continuum_word(v, rng) for v in np.linspace(0.04, 0.25, 50)]
    assert [int(w.split()[-1]) for w in words] == sorted(int(w.split()[-1]) for w in words)
    assert speed_prompt("reach the red cube", 0.2, "adverbs", rng) == "reach the red cube quickly"
    for labels, v in (("continuum", 0.2), ("adverbs", 0.05), ("adverbs", 0.2)):
        prompt = speed_prompt("reach the red cube", v, labels, rng)
        assert prompt != "reach the red cube"
        assert base_instruction(prompt) == "reach the red cube"
    with pytest.raises(ConfigError, match="speed_labels 'fast'"):
        speed_prompt("x", 0.1, "fast", rng)
    with pytest.raises(ConfigError, match="paired needs prompts"):
        extreme_prompts("none")
    # the height concept's words: the same scale, the same stripping
    assert continuum_word(0.15, (0.03, 0.15), "height") == "at height 9"
    prompt = speed_prompt("reach the red cube", 0.03, "continuum", (0.03, 0.15), "height")
    assert prompt == "reach the red cube at height 1"
    assert base_instruction(prompt) == "reach the red cube"
    assert extreme_prompts("continuum", "height") == ("at height 9", "at height 1")


def test_contrast_takes_thirds_of_episodes_not_of_steps() -> None:
    """Three named classes, slow episodes three times longer: the fast set is exactly the
    'quickly' episodes and the slow set exactly the 'slowly' ones."""
    lengths = {0.05: 90, 0.12: 40, 0.2: 30}
    concept, episode = [], []
    for e, v in enumerate([0.05, 0.12, 0.2] * 3):
        concept += [v] * lengths[v]
        episode += [e] * lengths[v]
    c, ep = np.array(concept), np.array(episode)
    fast, slow = episode_contrast(c, ep)
    assert set(c[fast]) == {0.2} and set(c[slow]) == {0.05}
    hi = np.quantile(c, 2 / 3)  # thirds of steps (the old rule) reach into the plain class
    assert 0.12 in set(c[c >= hi])
    with pytest.raises(ConfigError, match="several speeds"):
        episode_contrast(np.full(10, 0.1), np.repeat([0, 1], 5))


def test_ridge_probe_recovers_a_planted_direction() -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(400, 32, generator=gen)
    w_true = torch.randn(32, generator=gen)
    y = (x @ w_true).numpy() * 0.01 + 0.1 + 0.001 * np.random.default_rng(0).normal(size=400)
    w, info = ridge_probe(x, y, np.repeat(np.arange(40), 10), ridge=1e-4)
    assert float(torch.nn.functional.cosine_similarity(w, w_true, dim=0)) > 0.99
    assert info["r2_heldout"] > 0.95 and info["r2_train"] > 0.95


# ---------------------------------------------------------------------------------------------
# extraction on a tiny model
# ---------------------------------------------------------------------------------------------


def _graded_steps(labels: str, concept: str = "speed") -> DemonstrationSteps:
    rng = np.random.default_rng(0)
    speeds = np.linspace(0.05, 0.24, 6)
    n = 4
    images = rng.integers(0, 255, size=(len(speeds) * n, 32, 32, 3), dtype=np.uint8)
    prompts = [speed_prompt("reach the red cube", v, labels, (0.04, 0.25), concept) for v in speeds]
    instructions = [p for p in prompts for _ in range(n)]
    actions = rng.uniform(-0.2, 0.2, size=(len(images), 7)).astype(np.float32)
    return DemonstrationSteps(
        images, instructions, actions, np.repeat(np.arange(len(speeds)), n),
        np.repeat(speeds, n), {"speed_labels": labels, "concept": concept},
    )  # fmt: skip


@pytest.fixture(scope="module")
def graded_vla() -> tuple[Any, Any]:
    words = [
        speed_prompt("reach the red cube", v, "continuum", (0.04, 0.25), c)
        for v in np.linspace(0.04, 0.25, 9)
        for c in ("speed", "height")
    ]
    words += ["reach the red cube quickly slowly"]  # fmt: skip
    actions = np.random.default_rng(1).uniform(-0.2, 0.2, size=(64, 7))
    model, proc = build_tiny_vla(words, actions, "toy", seed=0, image_size=32)
    return model.eval(), proc


@pytest.mark.parametrize("positions", ["last", "action"])
def test_each_method_gives_a_direction_with_the_mean_difference_scale(
    graded_vla: tuple[Any, Any], positions: str
) -> None:
    model, proc = graded_vla
    steps = _graded_steps("continuum")
    fast, slow = episode_contrast(steps.concept, steps.episode)
    act = {
        name: _activations(model, proc, steps, np.flatnonzero(m), 1, positions, "toy")
        for name, m in (("fast", fast), ("slow", slow))
    }
    md = extract_direction(model, proc, steps, "mean_difference", 1, positions, "toy")
    torch.testing.assert_close(md.vector, act["fast"].mean(0) - act["slow"].mean(0))
    assert md.layer == 1 and md.meta["method"] == "mean_difference"

    paired = extract_direction(model, proc, steps, "paired", 1, positions, "toy", max_steps=48)
    idx = np.arange(len(steps))  # max_steps // 2 >= all 24 steps: every step is paired
    base = ["reach the red cube"] * len(idx)
    hi = _activations(
        model, proc, steps, idx, 1, positions, "toy", [f"{b} at speed 9" for b in base]
    )
    lo = _activations(
        model, proc, steps, idx, 1, positions, "toy", [f"{b} at speed 1" for b in base]
    )
    torch.testing.assert_close(paired.vector, (hi - lo).mean(0), rtol=1e-4, atol=1e-5)
    assert paired.meta["pair"] == ["at speed 9", "at speed 1"]

    probe = extract_direction(model, proc, steps, "probe", 1, positions, "toy")
    x = _activations(model, proc, steps, np.arange(len(steps)), 1, positions, "toy")
    w, _ = ridge_probe(x, steps.concept, steps.episode)
    delta = steps.concept[fast].mean() - steps.concept[slow].mean()
    # alpha = 1 moves the probe's reading by the fast-slow difference (the mean difference's scale)
    assert float(probe.vector @ w) == pytest.approx(delta, rel=1e-4)
    assert torch.isfinite(probe.vector).all() and "r2_heldout" in probe.meta["probe"]


def test_unnamed_episodes_are_left_out_of_the_contrast(graded_vla: tuple[Any, Any]) -> None:
    """With unnamed_fraction > 0 the plain-prompt episodes carry no speed in the prompt: the
    mean difference and the probe are taken over the named episodes only."""
    model, proc = graded_vla
    steps = _graded_steps("continuum")
    plain = np.isin(steps.episode, [1, 4])  # two episodes keep the plain instruction
    steps.instructions[:] = [
        base_instruction(p) if u else p for p, u in zip(steps.instructions, plain, strict=True)
    ]
    assert speed_named(steps).all()  # the earlier data (no unnamed_fraction): every step counts
    steps.meta["unnamed_fraction"] = 0.5
    assert (speed_named(steps) == ~plain).all()
    fast, slow = episode_contrast(steps.concept, steps.episode, named=~plain)
    assert not (fast & plain).any() and not (slow & plain).any()
    assert set(steps.episode[fast]) == {5} and set(steps.episode[slow]) == {0}
    act = {
        name: _activations(model, proc, steps, np.flatnonzero(m), 1, "last", "toy")
        for name, m in (("fast", fast), ("slow", slow))
    }
    md = extract_direction(model, proc, steps, "mean_difference", 1, "last", "toy")
    torch.testing.assert_close(md.vector, act["fast"].mean(0) - act["slow"].mean(0))


def test_graded_demonstrations_leave_the_asked_fraction_unnamed() -> None:
    env, reset, targets = steer_env("mujoco:arm_reach", 32, "jittered")
    steps = collect_graded_demonstrations(
        env, 8, "continuum", (0.04, 0.25), 0, reset, targets, unnamed_fraction=0.5
    )
    per_episode = {int(e): steps.instructions[i] for i, e in enumerate(steps.episode)}
    plain = [e for e, p in per_episode.items() if base_instruction(p) == p]
    assert 0 < len(plain) < 8 and steps.meta["unnamed_fraction"] == 0.5
    assert all("at speed" in p for e, p in per_episode.items() if e not in plain)
    assert len({steps.images[steps.episode == e][0].tobytes() for e in per_episode}) == 8
    with pytest.raises(ConfigError, match="unnamed_fraction"):
        SteerExperimentConfig(unnamed_fraction=1.5)


def test_tiny_vla_sees_the_camera_at_its_own_size(tmp_path: Path) -> None:
    """--image-size 96 gives a 96 px model (144 patches and room for the prompt), not 64."""
    from embodied.apps.training.config_vla import TinyVLAConfig
    from embodied.apps.training.training_vla import train_tiny_on_env
    from policies.openvla.training_openvla import BCSettings

    env, reset, targets = steer_env("mujoco:arm_reach", 96, "jittered", 0.01)
    steps = collect_graded_demonstrations(env, 2, "continuum", (0.1, 0.2), 0, reset, targets)
    model, _, _, hist = train_tiny_on_env(
        env, tmp_path / "vla", 0, BCSettings(steps=2, batch_size=4, log_every=1), reset,
        targets, demonstrations=steps, text={"num_hidden_layers": 1},
    )  # fmt: skip
    assert model.config.image_size == 96 and model.config.num_patches == 144
    record = json.loads((tmp_path / "vla" / "config.json").read_text())["training"]
    assert record["demonstration_seeds"] == [0, 2]  # what steer experiment --model keeps apart
    assert model.config.text["max_position_embeddings"] >= 144 + 128
    assert np.isfinite(hist[-1]["loss"])
    policy = policies.load(tmp_path / "vla", device="cpu")
    episode = rollout(env, policy, seed=99, reset_options=reset, max_steps=2, record_images=False)
    assert len(episode) == 2 and np.isfinite(episode.actions).all()
    with pytest.raises(ConfigError, match="image_size"):
        TinyVLAConfig(image_size=100)  # not a multiple of the 8 px patch
    with pytest.raises(ConfigError, match="image_size"):
        TinyVLAConfig(image_size=136)  # more positions than the tiny model has


def test_experiment_runs_a_dial_checkpoint_with_its_preset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``steer experiment --model DIAL/vla --preset as_trained``: the tiny VLA gets the
    processor it was trained with, not the env's default (openvla) one."""
    import embodied.apps.lab.steer as steer_mod
    from policies.openvla.configuration_openvla import BC_SAMPLING
    from policies.openvla.loading_openvla import save_pretrained
    from policies.openvla.policy_openvla import PRESETS
    from policies.openvla.steering import SteeringDirection

    steps = _graded_steps("continuum")
    model, proc = build_tiny_vla(
        steps.instructions, steps.actions, "mujoco_arm_reach", image_size=32
    )
    save_pretrained(model, proc.tokenizer, tmp_path / "vla")
    SteeringDirection(torch.randn(model.config.llm_dim), layer=1).save(tmp_path / "dir")
    seen: dict[str, Any] = {}

    def fake_run(env: Any, policy: Any, settings: Any, *args: Any, **kwargs: Any) -> dict:
        seen.update(
            preset=policy.preset, reset=settings.reset_options, suffix=policy.instruction_suffix
        )
        return {"timing": {}}

    monkeypatch.setattr(steer_mod, "run_experiment", fake_run)
    for preset, expected in (("as_trained", "as_trained"), (None, "openvla")):
        cfg = SteerExperimentConfig(
            model=str(tmp_path / "vla"), preset=preset, direction=tmp_path / "dir",
            layout="jittered", jitter=0.01, image_size=32, instruction_suffix="at speed 5",
        )  # fmt: skip
        settings = ExperimentSettings(haeon_coefs=(), sweep_alphas=(0.0,), rl_timesteps=0)
        steer_mod.steer_experiment(tmp_path / str(preset), cfg, settings)
        assert seen["preset"] == expected and seen["reset"]["jitter"] == 0.01
        assert seen["suffix"] == "at speed 5"  # the prompt the dial was measured with
    assert steer_mod.model_training_seeds(cfg.model) == (0, 0)  # saved without a record
    config_json = tmp_path / "vla" / "config.json"
    saved = json.loads(config_json.read_text())
    config_json.write_text(json.dumps({**saved, "training": {"demonstration_seeds": [0, 96]}}))
    assert steer_mod.experiment_training_seeds(cfg, 4) == (0, 96)
    with pytest.raises(ConfigError, match=r"training seeds \[0, 96\) overlap evaluation"):
        steer_mod.steer_experiment(tmp_path / "overlap", cfg, replace(settings, seed=90))
    wrong = replace(cfg, preset="as_trained", image_size=64)
    with pytest.raises(ConfigError, match="pass --image-size 32"):
        steer_mod.steer_experiment(tmp_path / "wrong", wrong, settings)
    field = SteerExperimentConfig.__dataclass_fields__["preset"]
    assert set(field.metadata["check"].choices) - {None} == set(PRESETS)
    sampling = SteerExperimentConfig.__dataclass_fields__["bc_sampling"].metadata["check"]
    assert tuple(sampling.choices) == BC_SAMPLING  # the lab's choices are BCSettings' own
    with pytest.raises(ConfigError, match="preset"):
        SteerExperimentConfig(preset="tf")


def test_a_height_direction_pairs_the_height_words_and_names_its_concept(
    graded_vla: tuple[Any, Any],
) -> None:
    """The same extraction on demonstrations that vary the height: the pair is "at height 9"
    minus "at height 1" on the same frames, and every method names the concept ee_height."""
    model, proc = graded_vla
    steps = _graded_steps("continuum", "height")
    paired = extract_direction(model, proc, steps, "paired", 1, "last", "toy", max_steps=48)
    idx = np.arange(len(steps))
    hi, lo = (
        _activations(model, proc, steps, idx, 1, "last", "toy", [f"reach the red cube {w}"] * 24)
        for w in ("at height 9", "at height 1")
    )
    torch.testing.assert_close(paired.vector, (hi - lo).mean(0), rtol=1e-4, atol=1e-5)
    assert paired.meta["pair"] == ["at height 9", "at height 1"]
    for method in ("mean_difference", "paired", "probe"):
        d = extract_direction(model, proc, steps, method, 1, "last", "toy")
        assert d.concept == "ee_height" and "height" in d.meta.get("contrast", "height")
    word = extract_direction(model, proc, steps, "paired", 1, "word", "toy")
    # the number's position: where the speed's number sits in "at speed k" too
    assert word.position == word_position(proc, "reach the red cube", "at speed 9", "at speed 1")


def test_paired_needs_named_speeds_and_unknown_methods_are_refused(
    graded_vla: tuple[Any, Any],
) -> None:
    model, proc = graded_vla
    with pytest.raises(ConfigError, match="paired needs prompts"):
        extract_direction(model, proc, _graded_steps("none"), "paired", 1, "last", "toy")
    with pytest.raises(ConfigError, match="method 'pca'"):
        extract_direction(model, proc, _graded_steps("none"), "pca", 1, "last", "toy")


# ---------------------------------------------------------------------------------------------
# the dial check
# ---------------------------------------------------------------------------------------------


def _point(alpha: float, speed: float, success: float, half: float = 0.002) -> dict[str, Any]:
    return {"alpha": alpha, "mean_concept": speed, "concept_ci": [speed - half, speed + half],
            "success_rate": success}  # fmt: skip


def test_check_dial_monotone_span_and_working_range() -> None:
    base = 0.1
    dial = [_point(a, base * (1 + 0.3 * a), 1.0) for a in (-2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2)]
    v = check_dial(dial)
    assert v["is_dial"] and v["monotone"] and v["spans_target"] and v["direction"] == 1.0
    assert v["working_range"] == [-2, 2] and v["ratio_range"] == pytest.approx([0.4, 1.6])

    cliff = [dict(p) for p in dial]  # success lost beyond |alpha| 1: the range shrinks
    for p in cliff:
        if abs(p["alpha"]) > 1:
            p["success_rate"] = 0.3
    v = check_dial(cliff)
    assert v["working_range"] == [-1, 1] and not v["spans_target"] and not v["is_dial"]

    bumpy = [dict(p) for p in dial]
    bumpy[5]["mean_concept"] = bumpy[4]["mean_concept"] - 0.01  # a reversal far outside the noise
    v = check_dial(bumpy)
    assert not v["monotone"] and v["reversals"] == [[0, 0.5]]
    noisy = [dict(p) for p in dial]
    noisy[5]["mean_concept"] = (
        noisy[4]["mean_concept"] - 0.001
    )  # inside the interval: flat, not back
    assert check_dial(noisy)["monotone"]

    flat = [_point(a, base, 1.0) for a in (-1, 0, 1)]
    assert not check_dial(flat)["monotone"] and not check_dial(flat)["is_dial"]
    assert check_dial([_point(0, base, 0.5), _point(1, 0.2, 1.0)])["working_range"] is None
    with pytest.raises(ConfigError, match="no alpha = 0"):
        check_dial([_point(1, base, 1.0)])


def test_dial_report_says_why_there_is_no_working_range() -> None:
    """Unsteered success below the floor: the report names the cause, never 'nanx-nanx'."""
    points = []
    for a, speed, wins in ((-1, 0.072, 0), (0, 0.103, 1), (1, 0.063, 0)):
        p = _point(a, speed, wins / 20)
        p.update(successes=wins, episodes=20, success_ci=[0.0, 0.2], scenes=20)
        points.append(p)
    report = {
        "env_id": "mujoco:arm_reach", "speed_labels": "continuum", "layout": "random",
        "methods": {"mean_difference": {"points": points, "verdict": check_dial(points)}},
    }  # fmt: skip
    md = dial_markdown(report)
    assert "nan" not in md
    assert "no working range: unsteered success 1/20 is below the 90 % floor" in md
    working = [_point(a, 0.1 * (1 + 0.6 * a), 1.0) for a in (-1, 0, 1)]
    for p in working:
        p.update(successes=20, episodes=20, success_ci=[0.83, 1.0], scenes=20)
    report["methods"]["mean_difference"] = {"points": working, "verdict": check_dial(working)}
    assert "working range [-1, 1], speed 0.40x-1.60x unsteered" in dial_markdown(report)
    assert "instruction +" not in md
    report["instruction_suffix"] = "at speed 5"
    assert "layout random, instruction + 'at speed 5')" in dial_markdown(report)


def test_dial_settings_need_the_unsteered_point_and_disjoint_seeds() -> None:
    with pytest.raises(ConfigError, match="lack 0"):
        DialSettings(alphas=(-1.0, 1.0))
    with pytest.raises(ConfigError, match="overlaps the demonstration seeds"):
        DialSettings(tuning_seed=10, demonstrations=96)


def test_best_fixed_takes_success_as_a_constraint() -> None:
    sweep = [
        {"alpha": 0.0, "summary": {"mean_concept": 0.10, "success_rate": 1.0}},
        {"alpha": -1.0, "summary": {"mean_concept": 0.07, "success_rate": 0.95}},
        {"alpha": -2.0, "summary": {"mean_concept": 0.06, "success_rate": 0.2}},  # stalls the arm
    ]
    assert best_fixed(sweep, 0.06) == -2.0  # the earlier rule: closest speed, success ignored
    assert best_fixed(sweep, 0.06, min_success=0.9) == -1.0
    for r in sweep:  # nothing keeps the floor: the most successful setting
        r["summary"]["success_rate"] = 0.5 if r["alpha"] else 0.6
    assert best_fixed(sweep, 0.06, min_success=0.9) == 0.0
    with pytest.raises(ConfigError, match="min_success_ratio"):
        ExperimentSettings(min_success_ratio=1.5)


# ---------------------------------------------------------------------------------------------
# distinct scenes, graded demonstrations, the command
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("layout", "distinct"), [("random", 6), ("fixed", None)])
def test_episodes_of_a_row_are_distinct_scenes_on_a_random_layout(
    layout: str, distinct: int | None
) -> None:
    env, reset, _ = steer_env("mujoco:arm_reach", 32, layout)
    settings = ExperimentSettings(reset_options=reset, sweep_alphas=(), haeon_coefs=())
    policy = policies.load("expert", env=env, speed=0.25)
    rows = run_episodes(env, policy, None, settings, 6, "expert", first_seed=5000)
    scenes = [e["scene"] for e in rows["episodes"]]
    assert all(isinstance(s, str) for s in scenes)
    if distinct is not None:
        assert len(set(scenes)) == rows["summary"]["distinct_scenes"] == distinct
    else:  # the fixed layout: only the target colour changes, at most 4 scenes
        assert rows["summary"]["distinct_scenes"] == len(set(scenes)) <= 4


def test_graded_demonstrations_vary_speed_continuously_per_episode() -> None:
    env = sim.make("mujoco:arm_reach", image_size=32)
    steps = collect_graded_demonstrations(env, 4, "continuum", (0.04, 0.25), seed=0)
    per = [steps.concept[steps.episode == e] for e in range(4)]
    assert all(np.ptp(p) == 0 for p in per)  # one cruise speed per episode
    speeds = [float(p[0]) for p in per]
    assert len(set(speeds)) == 4 and all(0.04 <= v <= 0.25 for v in speeds)
    for e, v in enumerate(speeds):
        prompts = {steps.instructions[i] for i in np.flatnonzero(steps.episode == e)}
        assert prompts == {
            f"{base_instruction(next(iter(prompts)))} {continuum_word(v, (0.04, 0.25))}"
        }
    assert steps.meta["speed_labels"] == "continuum"


def test_graded_height_demonstrations_cruise_at_their_named_height() -> None:
    """The height concept's data: one hover height per episode drawn from the range, the
    concept its cruise height above the table, the prompt "at height k" by ninths of the range,
    the start beside the cubes; adverbs (speed classes) are refused for it."""
    from embodied.apps.lab.steer import GRASP_Z_M, concept_reset

    env, reset, targets = steer_env("mujoco:arm_reach", 32, "jittered", 0.01)
    reset |= concept_reset("height")
    steps = collect_graded_demonstrations(
        env, 4, "continuum", (0.04, 0.25), 0, reset, targets, concept="height",
        height_range=(0.03, 0.15), height_speed=0.1,
    )  # fmt: skip
    heights = [float(steps.concept[steps.episode == e][0]) for e in range(4)]
    assert len(set(heights)) == 4 and all(
        GRASP_Z_M + 0.03 <= h <= GRASP_Z_M + 0.15 for h in heights
    )
    for e, h in enumerate(heights):
        prompts = {steps.instructions[i] for i in np.flatnonzero(steps.episode == e)}
        word = continuum_word(h - GRASP_Z_M, (0.03, 0.15), "height")
        assert prompts == {f"{base_instruction(next(iter(prompts)))} {word}"}
    assert steps.meta["concept"] == "height" and steps.meta["height_range"] == [0.03, 0.15]
    with pytest.raises(ConfigError, match="adverbs name speeds only"):
        collect_graded_demonstrations(env, 1, "adverbs", concept="height")
    with pytest.raises(ConfigError, match="speed_labels adverbs"):
        SteerExperimentConfig(concept="height")


def test_graded_height_demonstrations_start_at_drawn_heights(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``height_start_range``: each episode starts beside the cubes at its own drawn height
    (the recovery data a prompt's height needs), and a one-point range leaves the data as a
    fixed start makes it."""
    import embodied.apps.lab.steer_dial as steer_dial
    from embodied.apps.lab.config_steer import HEIGHT_START_M
    from embodied.apps.lab.steer import concept_reset

    env, reset, targets = steer_env("mujoco:arm_reach", 32, "jittered", 0.01)
    reset |= concept_reset("height")
    starts: list[list[float]] = []
    real_rollout = steer_dial.rollout

    def spy(env: Any, policy: Any, **kwargs: Any) -> Any:
        starts.append(list(kwargs["reset_options"]["start"]))
        return real_rollout(env, policy, **kwargs)

    monkeypatch.setattr(steer_dial, "rollout", spy)

    def collect(n: int, start_range: tuple[float, float] | None) -> Any:
        return collect_graded_demonstrations(
            env, n, "continuum", (0.04, 0.25), 0, reset, targets, concept="height",
            height_start_range=start_range,
        )  # fmt: skip

    steps = collect(3, (0.06, 0.22))
    zs = [z for _, _, z in starts]
    assert len(set(zs)) == 3 and all(0.06 <= z <= 0.22 for z in zs)
    assert all(s[:2] == list(HEIGHT_START_M[:2]) for s in starts)
    assert steps.meta["height_start_range"] == [0.06, 0.22]
    first = [float(steps.concept[steps.episode == e][0]) for e in range(3)]
    starts.clear()
    fixed, one_point = collect(1, None), collect(1, (0.15, 0.15))
    assert starts == [list(HEIGHT_START_M)] * 2
    assert np.array_equal(fixed.actions, one_point.actions)
    assert one_point.meta["height_start_range"] is None
    # the hover heights are the same draws as with a fixed start
    assert float(fixed.concept[0]) == first[0]


def test_graded_height_descents_start_near_the_target_at_drawn_heights(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``height_descents``: added episodes start near their target, toward the usual start,
    at drawn heights, and the expert lands on the cube from each; the cruise episodes before
    them are those collected without descents."""
    import embodied.apps.lab.steer_dial as steer_dial
    from embodied.apps.lab.config_steer import DESCENT_START_M, HEIGHT_START_M
    from embodied.apps.lab.steer import concept_reset

    env, reset, targets = steer_env("mujoco:arm_reach", 32, "jittered", 0.01)
    reset |= concept_reset("height")
    seen: list[tuple[list[float], np.ndarray, bool]] = []
    real_rollout = steer_dial.rollout

    def spy(env: Any, policy: Any, **kwargs: Any) -> Any:
        ep = real_rollout(env, policy, **kwargs)
        seen.append((list(kwargs["reset_options"]["start"]), env.task.target_point(), ep.success))
        return ep

    monkeypatch.setattr(steer_dial, "rollout", spy)

    def collect(descents: int, start_range: tuple[float, float] | None = (0.06, 0.26)) -> Any:
        return collect_graded_demonstrations(
            env, 2, "continuum", (0.04, 0.25), 0, reset, targets, concept="height",
            height_start_range=start_range, height_descents=descents,
        )  # fmt: skip

    steps = collect(3)
    assert steps.meta["height_descents"] == 3 and len(np.unique(steps.episode)) == 5
    descents = seen[2:]
    for start, target, success in descents:
        toward = np.subtract(start[:2], target[:2])
        distance = float(np.linalg.norm(toward))
        assert DESCENT_START_M[0] <= distance <= DESCENT_START_M[1]
        # on the line from the target to the cruise episodes' start
        assert np.dot(toward / distance, np.subtract(HEIGHT_START_M[:2], target[:2])) > 0.99 * (
            np.linalg.norm(np.subtract(HEIGHT_START_M[:2], target[:2]))
        )
        assert 0.06 <= start[2] <= 0.26 and success
    assert len({round(s[2], 6) for s, _, _ in descents}) == 3
    cruise = collect(0)
    first = steps.episode < 2
    assert np.array_equal(steps.actions[first], cruise.actions)
    assert cruise.meta["height_descents"] == 0
    with pytest.raises(ConfigError, match="height_descents=1 needs the height concept"):
        collect(1, None)


def test_steer_dial_command_writes_the_dose_response(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from embodied.apps.cli import app

    out = tmp_path / "dial"
    argv = ["lab", "steer", "dial", "--out", str(out), "--demonstrations", "4", "--train-steps", "2",
            "--episodes", "2", "--alphas", "-1,0", "--methods", "mean_difference,paired,probe",
            "--image-size", "32", "--llm-layers", "2"]  # fmt: skip
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "dial.json").read_text())
    assert "paired" in report["methods"] and "skipped" in report["methods"]["paired"]
    for method in ("mean_difference", "probe"):
        r = report["methods"][method]
        assert [p["alpha"] for p in r["points"]] == [-1.0, 0.0]
        assert all(p["episodes"] == 2 and p["scenes"] == 2 for p in r["points"])
        assert set(r["verdict"]) >= {"is_dial", "monotone", "working_range"}
        assert (out / f"speed_{method}.safetensors").exists()
    assert report["seeds"] == {"demonstrations": [0, 4], "tuning": [5000, 5002]}
    assert (out / "dial.png").stat().st_size > 0 and "| probe |" in (out / "dial.md").read_text()
    assert math.isfinite(report["methods"]["probe"]["points"][1]["mean_concept"])


def test_steer_dial_command_on_the_height_concept(tmp_path: Path) -> None:
    """``--concept height``: the demonstrations vary the cruise height ("at height k"), the
    directions are saved as height_<method>, and the dose-response is in m (the fingertip's
    height while it is away from the target)."""
    from typer.testing import CliRunner

    from embodied.apps.cli import app

    out = tmp_path / "dial"
    argv = ["lab", "steer", "dial", "--out", str(out), "--demonstrations", "4", "--train-steps", "2",
            "--episodes", "1", "--alphas", "0,1", "--methods", "paired",
            "--image-size", "32", "--llm-layers", "2", "--concept", "height",
            "--speed-labels", "continuum", "--layout", "jittered", "--jitter", "0.01",
            "--height-range", "0.04,0.12"]  # fmt: skip
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "dial.json").read_text())
    assert report["concept"] == "height" and report["height_range"] == [0.04, 0.12]
    r = report["methods"]["paired"]  # the untrained model runs each episode to the horizon
    assert r["direction"]["meta"]["concept"] == "height"
    assert r["direction"]["meta"]["pair"] == ["at height 9", "at height 1"]
    assert (out / "height_paired.safetensors").exists()
    heights = [p["mean_concept"] for p in r["points"] if math.isfinite(p["mean_concept"])]
    assert heights and all(0.0 < h < 0.3 for h in heights)  # m above the table
    assert "mean height m" in (out / "dial.md").read_text()
    fm = report["feedback_map"]  # 5 start heights x 5 prompts, on 1 tuning scene
    assert np.asarray(fm["vz_mps"]).shape == (5, 5) and np.isfinite(fm["vz_mps"]).all()
    assert '| start z | "at height 1" |' in (out / "dial.md").read_text()


def test_height_feedback_map_shows_a_policy_that_returns_to_its_prompts_height() -> None:
    """A policy that climbs below its prompt's height and sinks above it gives a map whose
    rows flip sign between columns; the starts are the given heights beside the cubes."""
    from embodied.apps.lab.steer import concept_reset
    from embodied.apps.lab.steer_dial import height_feedback_map
    from embodied.contracts import Policy

    env, reset, _ = steer_env("mujoco:arm_reach", 32, "jittered", 0.01)
    reset |= concept_reset("height")

    class ToHeight(Policy):
        action_dim = 4

        def __init__(self, words: str) -> None:
            super().__init__()
            self.z = 0.05 + 0.015 * int(words.split()[-1])  # "at height k"

        def predict_action_chunk(self, obs: Any) -> np.ndarray:
            ee = env.task.ee_position(env.data)  # type: ignore[attr-defined]
            return np.array([[0.0, 0.0, 0.05 * np.sign(self.z - ee[2]), 0.0]])

    fm = height_feedback_map(env, ToHeight, reset, seeds=(5000, 5001))
    assert fm["start_z_m"] == [0.08, 0.11, 0.14, 0.17, 0.2] and fm["levels"] == [1, 3, 5, 7, 9]
    # prompt heights 0.065, 0.095, 0.125, 0.155, 0.185 m
    expected = [
        [0.05 * np.sign(0.05 + 0.015 * k - z) for k in fm["levels"]] for z in fm["start_z_m"]
    ]
    np.testing.assert_allclose(fm["vz_mps"], expected, atol=1e-9)


# ---------------------------------------------------------------------------------------------
# the speed word's own position, the embeddings, and numbers tied to a line
# ---------------------------------------------------------------------------------------------


def _prefill_logits(model: Any, proc: Any, prompt: str, image: np.ndarray) -> torch.Tensor:
    ids, am = proc.encode_prompts([prompt])
    emb, mask, pos, _ = model.embed(proc.images([image]), ids, am)
    out = model.language_model(inputs_embeds=emb, attention_mask=mask, position_ids=pos)
    return out.logits[:, -1].float()


def test_word_direction_at_the_embeddings_moves_the_speed_word_exactly(
    graded_vla: tuple[Any, Any],
) -> None:
    """Paired at the speed word, layer 0's input: the vector is the difference of the two
    numbers' embeddings, and alpha = 1 on "at speed 1" gives what "at speed 9" gives."""
    model, proc = graded_vla
    steps = _graded_steps("continuum")
    k = word_position(proc, "reach the red cube", "at speed 9", "at speed 1")
    ids = proc.prompt_ids("reach the red cube at speed 9")
    assert proc.tokenizer.convert_ids_to_tokens([ids[-k]]) == ["9"]
    d = extract_direction(
        model, proc, steps, "paired", 0, "word", "toy", max_steps=48, site="input"
    )  # fmt: skip
    assert d.position == k and d.site == "input" and d.meta["site"] == "input"
    table = model.language_model.get_input_embeddings().weight
    nine, one = proc.tokenizer.convert_tokens_to_ids(["9", "1"])
    torch.testing.assert_close(d.vector, table[nine] - table[one])
    image = steps.images[0]
    slow, fast = (
        _prefill_logits(model, proc, f"reach the red cube at speed {w}", image) for w in (1, 9)
    )
    hook = SteeringHook(model, d, alpha=1.0).attach()
    try:
        torch.testing.assert_close(
            _prefill_logits(model, proc, "reach the red cube at speed 1", image), fast,
            rtol=1e-4, atol=1e-4,
        )  # fmt: skip
        hook.alpha = 0.5
        half = _prefill_logits(model, proc, "reach the red cube at speed 1", image)
        assert not torch.allclose(half, slow) and not torch.allclose(half, fast)
        # a cached decode step (one position) carries no prompt position: left alone
        assert hook._shift(torch.zeros(1, 1, model.config.llm_dim)) is None
        tokens = model.generate_tokens(proc.images([image]), *proc.encode_prompts(["x"]), 3)
        assert tokens.shape == (1, 3)
    finally:
        hook.remove()


def test_a_layers_input_site_reads_the_previous_layers_output(
    graded_vla: tuple[Any, Any],
) -> None:
    model, proc = graded_vla
    steps = _graded_steps("continuum")
    idx = np.arange(6)
    after_0 = _activations(model, proc, steps, idx, 0, "last", "toy", site="output")
    into_1 = _activations(model, proc, steps, idx, 1, "last", "toy", site="input")
    torch.testing.assert_close(after_0, into_1)
    word = _activations(model, proc, steps, idx, 0, 4, "toy", site="input")
    assert word.shape == after_0.shape and not torch.allclose(word, after_0)
    with pytest.raises(ConfigError, match="site 'middle'"):
        extract_direction(model, proc, steps, "paired", 0, "word", "toy", site="middle")
    with pytest.raises(ConfigError, match="positions 'first'"):
        extract_direction(model, proc, steps, "paired", 0, "first", "toy")
    with pytest.raises(ConfigError, match="one word position"):
        word_position(proc, "reach the red cube", "quickly", "at speed 1")


def test_numbers_train_tied_to_one_evenly_spaced_line() -> None:
    """``BCSettings.ordinal_words``: after training the nine numbers' embeddings lie on one
    line, evenly spaced, in a plain table (an ordinary checkpoint); other rows train freely."""
    steps = _graded_steps("continuum")
    words = [speed_prompt("reach the red cube", v, "continuum", (0.04, 0.25)) for v in
             np.linspace(0.04, 0.25, 9)]  # fmt: skip
    model, proc = build_tiny_vla(words, steps.actions, "toy", seed=0, image_size=32)
    table = model.language_model.get_input_embeddings()
    before = table.weight.detach().clone()
    ids = ordinal_token_ids(proc, CONTINUUM_WORDS)
    train_bc(
        model, proc, steps,
        BCSettings(steps=6, batch_size=8, lr=3e-3, log_every=3, ordinal_words=CONTINUUM_WORDS),
        "toy",
    )  # fmt: skip
    assert not parametrize.is_parametrized(table)
    rows = table.weight.detach()[ids]
    gaps = rows[1:] - rows[:-1]
    torch.testing.assert_close(gaps, gaps[:1].expand_as(gaps), rtol=1e-4, atol=1e-5)
    assert float(gaps[0].norm()) > 0
    reach = proc.tokenizer.convert_tokens_to_ids("reach")
    assert not torch.equal(table.weight[reach], before[reach])  # the rest still trains
    assert not torch.equal(rows, before[ids])
    with pytest.raises(ConfigError, match="ordinal word 'zzz'"):
        ordinal_token_ids(proc, ("1", "zzz"))
    # few demonstrations name only some numbers: the tokenizer still knows the whole scale
    _, few_proc = build_tiny_vla(
        ["reach the red cube at speed 5"], steps.actions, "toy", image_size=32,
        extra_words=CONTINUUM_WORDS,
    )  # fmt: skip
    assert len(set(ordinal_token_ids(few_proc, CONTINUUM_WORDS))) == 9
    with pytest.raises(ConfigError, match="two or more distinct"):
        ordinal_token_ids(proc, ("1", "1"))


def test_line_embedding_needs_the_continuum_labels() -> None:
    with pytest.raises(ConfigError, match="speed_embedding"):
        SteerExperimentConfig(speed_embedding="line")
    cfg = SteerExperimentConfig(speed_embedding="line", speed_labels="continuum")
    assert cfg.ordinal_words() == CONTINUUM_WORDS == tuple("123456789")
    assert SteerExperimentConfig().ordinal_words() == ()
    with pytest.raises(ConfigError, match="positions"):
        SteerExperimentConfig(positions="first")


def test_the_torch_free_config_offers_exactly_the_sites_the_hook_knows() -> None:
    # The config is torch-free (the CLI builds its options without torch), so it keeps its
    # own copy of the component's tuple; the two must never drift apart.
    assert SITES == STEERING_SITES
    for site in STEERING_SITES:
        assert SteerExperimentConfig(site=site).site == site
    with pytest.raises(ConfigError, match="site"):
        SteerExperimentConfig(site="attention")


# ---------------------------------------------------------------------------------------------
# closed loop on a steered tiny VLA
# ---------------------------------------------------------------------------------------------


def _word_vla(
    tmp_path: Path,
    concept: str,
    level_actions: np.ndarray,
    reset_extra: dict[str, Any],
    bc: BCSettings,
) -> tuple[Any, dict[str, Any], Any]:
    """A real (tiny) OpenVLA trained on 8 arm_reach frames under each of "at <concept> 1".."9",
    level k commanding ``level_actions[k - 1]`` (vx, vy, vz; gripper open), steered by its paired
    direction at the number (layer 0's input) and resting on "at <concept> 5".

    Returns:
        The env (fixed layout), its reset options (``reset_extra`` added) and the policy.
    """
    from embodied.apps.training.training_vla import train_tiny_on_env
    from policies.openvla.policy_openvla import OpenVLAPolicy
    from policies.openvla.processor_openvla import OpenVLAProcessor

    env, reset, _ = steer_env("mujoco:arm_reach", 32, "fixed")
    reset |= reset_extra
    start = rollout(env, policies.load("expert", env=env, speed=0.1), seed=0,
                    reset_options=reset, max_steps=8)  # fmt: skip
    frames = start.observations["image.front"]
    actions = np.zeros((9 * len(frames), 4), np.float32)
    actions[:, :3], actions[:, 3] = np.repeat(level_actions, len(frames), axis=0), -1.0
    steps = DemonstrationSteps(
        np.concatenate([frames] * 9),
        [f"reach the red cube at {concept} {k}" for k in CONTINUUM_WORDS for _ in frames],
        actions, np.repeat(np.arange(9), len(frames)), np.repeat(np.arange(9.0), len(frames)),
        {"camera": "image.front", "speed_labels": "continuum", "concept": concept},
    )  # fmt: skip
    model, proc, _, _ = train_tiny_on_env(
        env, tmp_path / "vla", 0, bc, reset, demonstrations=steps, text={"num_hidden_layers": 2}
    )
    proc = OpenVLAProcessor(proc.config, proc.tokenizer, "as_trained")
    model.eval()
    with torch.no_grad():
        direction = extract_direction(model, proc, steps, "paired", 0, "word", site="input")
    assert direction.concept == f"ee_{concept}"
    policy = OpenVLAPolicy(
        model, proc, intervention=direction, alpha_limit=1.0, preset="as_trained",
        source="tiny", instruction_suffix=f"at {concept} 5",
    )  # fmt: skip
    return env, reset, policy


def _closed_loop(
    env: Any,
    reset: dict[str, Any],
    policy: Any,
    concept: Any,
    controller: Any,
    setpoint: float,
    steps: int,
    transient_s: float,
) -> tuple[float, np.ndarray]:
    """One steered episode (seed 10000): its steady-state RMSE and the measured concept."""
    from controllers.analysis import steady_state_rmse
    from embodied.loop import Steering

    steering = Steering(concept, controller, knob="alpha", setpoint=setpoint)
    policy.reset_knobs()
    with torch.no_grad():
        ep = rollout(env, policy, steering=steering, seed=10_000, reset_options=reset,
                     max_steps=steps, record_images=False)  # fmt: skip
    y = ep.measurements
    return steady_state_rmse(y, np.full(len(y), setpoint), env.control_rate_hz, transient_s), y


def test_pid_on_the_word_direction_cuts_the_tracking_error_of_a_tiny_vla(tmp_path: Path) -> None:
    """The whole closed loop on a real (tiny) OpenVLA in the real arm_reach physics: a model
    trained so that "at speed k" commands 0.02 (k + 1) m/s sideways, its paired direction at
    the speed number (layer 0's input), a fixed-alpha sweep, PID gains and feedforward fitted
    on it, and the steering hook driven by the PID from the measured speed. At a setpoint below
    and one above the unsteered speed the PID's steady-state tracking error is well under the
    unsteered one.
    """
    from controllers import make as make_controller
    from embodied.apps.lab.steer import pid_from_sweep
    from embodied.concepts import make_concept

    speeds = 0.02 * np.arange(2, 11)  # "at speed 1" .. "at speed 9": 0.04 .. 0.20 m/s
    levels = np.zeros((9, 3))
    levels[:, 1] = speeds  # +y stays in reach
    bc = BCSettings(steps=150, batch_size=16, lr=3e-3, log_every=50, ordinal_words=CONTINUUM_WORDS)
    env, reset, policy = _word_vla(tmp_path, "speed", levels, {}, bc)

    def run(controller: Any, setpoint: float) -> tuple[float, np.ndarray]:
        speed = make_concept("ee_speed", filter_tau_s=0.1)
        return _closed_loop(env, reset, policy, speed, controller, setpoint, 30, 0.5)

    sweep: list[dict[str, Any]] = []
    for alpha in (-0.25, 0.0, 0.25):
        _, y = run(make_controller("fixed", value=alpha), 0.1)
        sweep.append({"alpha": alpha, "summary": {"mean_concept": float(np.mean(y[10:])),
                                                  "success_rate": 1.0}})  # fmt: skip
    speeds_swept = [p["summary"]["mean_concept"] for p in sweep]
    assert speeds_swept == sorted(speeds_swept) and speeds_swept[2] > speeds_swept[0] + 0.03
    settings = ExperimentSettings(alpha_limit=1.0, sweep_alphas=(-0.25, 0.0, 0.25),
                                  haeon_coefs=())  # fmt: skip
    gains = pid_from_sweep(sweep, settings)
    for key in ("static_gain", "fit", "fit_alphas", "feedforward"):
        gains.pop(key)
    unsteered = speeds_swept[1]
    for setpoint in (unsteered - 0.05, unsteered + 0.04):
        none, _ = run(None, setpoint)
        pid, y = run(make_controller("pid", **gains), setpoint)
        assert pid < 0.5 * none, (setpoint, pid, none)
        assert abs(float(np.mean(y[10:])) - setpoint) < 0.2 * setpoint


def test_pid_on_the_height_word_direction_holds_a_tiny_vla_at_a_height(tmp_path: Path) -> None:
    """The height concept's closed loop on a real (tiny) OpenVLA in the real arm_reach physics:
    a model trained so that "at height k" climbs at 0.03 (k - 5) m/s while moving sideways, its
    paired direction at the height number, and a proportional-integral controller on the
    measured fingertip height (away from the target) driving the steering hook. The arm's height
    integrates the commanded climb, so the gains are the IMC ones of an integrating plant
    (kp = 1 / (G lam), G the climb rate per unit alpha measured open loop). Unsteered ("at height
    5") the arm holds its start height; steered it settles at setpoints below and above it.
    """
    from controllers import make as make_controller
    from embodied.apps.lab.steer import concept_reset
    from embodied.concepts import make_concept

    levels = np.zeros((9, 3))
    levels[:, 1] = 0.05  # sideways, away from the cubes from the height start beside them
    levels[:, 2] = 0.03 * (np.arange(1, 10) - 5)  # "at height 1" .. "9": -0.12 .. 0.12 m/s
    # lr 3e-3 (the speed test's) leaves this vocabulary's model on two classes at 150 steps
    bc = BCSettings(steps=300, batch_size=16, lr=2e-3, log_every=50, ordinal_words=CONTINUUM_WORDS)
    env, reset, policy = _word_vla(tmp_path, "height", levels, concept_reset("height"), bc)

    def run(controller: Any, setpoint: float) -> tuple[float, np.ndarray]:
        height = make_concept("ee_height", cruise_radius_m=0.05)
        return _closed_loop(env, reset, policy, height, controller, setpoint, 40, 0.75)

    rates = []
    for alpha in (-0.25, 0.25):  # open loop: the climb rate each alpha commands
        _, y = run(make_controller("fixed", value=alpha), 0.15)
        rates.append(float(np.polyfit(np.arange(5, 20) / env.control_rate_hz, y[5:20], 1)[0]))
    gain = (rates[1] - rates[0]) / 0.5  # m/s per unit alpha
    assert gain > 0.05, rates
    _, held = run(None, 0.15)
    assert abs(held[-1] - held[0]) < 0.02  # unsteered, "at height 5" holds the height
    lam = 0.25  # s: the closed loop's time constant
    gains = {"kp": 1.0 / (gain * lam), "ki": 0.5 / (gain * lam * lam), "kd": 0.0,
             "output_min": -1.0, "output_max": 1.0, "anti_windup": "back_calculation"}  # fmt: skip
    for setpoint in (float(held[0]) - 0.03, float(held[0]) + 0.03):
        none, _ = run(None, setpoint)
        pid, y = run(make_controller("pid", **gains), setpoint)
        assert pid < 0.5 * none, (setpoint, pid, none)
        assert abs(float(np.mean(y[20:])) - setpoint) < 0.01, (setpoint, y[20:])
