"""The shipped small judge: checkpoint format, real rendered frames, wording sensitivity."""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
import torch

from embodied.apps.training.data_minijudge import first_env_success, record_episodes
from embodied.apps.training.training_minijudge import (
    development_seeds,
    history_train_seeds,
    seed_overlaps,
)
from embodied.errors import CheckpointError, ConfigError
from embodied.rewards.demo2reward import LabelledDemonstration
from embodied.rewards.minijudge import SHIPPED, MiniJudge, MiniJudgeConfig, clips_to_pixels

WRONG_CUBE_SEED0, WRONG_CUBE_EPISODES = 41000, 8
TEST_SEEDS = {"mujoco:arm_reach": [[40000, 40004], [41000, 41000 + WRONG_CUBE_EPISODES - 1]]}
"""Reset seeds of the episodes these tests record (conftest ``arm_demonstrations`` and wrong cubes)."""
WRONG_CUBE_MAX_FPR = 10.0
"""Percent of wrong-cube frames (the arm reaches another cube than the instruction names) the
shipped judge may call a success: measured 3.3 on the report split of calibration.json at the
threshold of the TNR >= 98.5 % rule (1.4 at the earlier TPR + TNR threshold; the checkpoint
before cell supervision: 51.8)."""
WRONG_CUBE_APPROACH_MAX_FPR = 10.0
"""Percent of wrong-cube frames before the arm reaches any cube called a success
(measured 3.5 at the shipped threshold, 2.2 at the earlier one)."""
REPORT_FLOORS = {"mujoco:arm_reach": (95.0, 95.0), "mujoco:reach_around": (95.0, 95.0)}
"""Per task (TPR, TNR) floors in percent on calibration.json's report split (measured: arm_reach
100.0 / 96.2, reach_around 100.0 / 98.0); 95 % TNR is the bar the judge must keep."""
AUC_FLOOR = 0.995
"""Per task frame ROC-AUC on the report split (measured 0.9998 and 0.9996)."""
COLOUR_BINDING_FLOOR = 90.0
"""calibration.json's colour binding on the report split (measured 100.0)."""


@pytest.fixture(scope="module")
def wrong_cube_demonstrations() -> list[LabelledDemonstration]:
    """arm_reach episodes where the expert reaches a cube of another colour than named."""
    return record_episodes(
        "mujoco:arm_reach", WRONG_CUBE_EPISODES, WRONG_CUBE_SEED0, kinds=("wrong",)
    )


def test_shipped_checkpoint_is_small_safetensors_and_json() -> None:
    files = {p.name: p.stat().st_size for p in SHIPPED.iterdir()}
    assert {"config.json", "model.safetensors", "calibration.json"} <= set(files)
    assert sum(files.values()) < 5e6
    assert not [n for n in files if n.endswith((".bin", ".pt", ".pkl", ".pth"))]
    calib = json.loads((SHIPPED / "calibration.json").read_text())
    assert 0 < calib["threshold"] < 1 and calib["table"]
    kinds = calib["oracle_agreement_per_kind"]
    assert {"expert", "near", "random"} <= set(kinds["mujoco:arm_reach"])
    assert kinds["mujoco:reach_around"]["blocked"]["n_neg"] > 0
    assert COLOUR_BINDING_FLOOR <= calib["colour_binding_percent"] <= 100
    arm_arrival = calib["arrival_agreement_per_env"]["mujoco:arm_reach"]
    assert arm_arrival["arrival_tpr"] >= 90 and arm_arrival["tnr"] >= 95  # measured 100 / 96.2
    ball_arrival = calib["arrival_agreement_per_env"]["mujoco:reach_around"]
    assert ball_arrival["arrival_tpr"] >= 90 and ball_arrival["tnr"] >= 95  # measured 100 / 98.0
    assert calib["threshold_rule"].startswith("lowest threshold keeping each task's TNR >= 98.5")
    from safetensors import safe_open

    with safe_open(str(SHIPPED / "model.safetensors"), "pt") as f:
        keys = list(f.keys())
    assert not any("encoder.layer" in k for k in keys)  # MiniLM is not copied


def test_shipped_threshold_is_chosen_and_reported_on_disjoint_seeds() -> None:
    """The threshold comes from a calibration split, the agreement from a report split on
    other seeds (with wrong-cube episodes), and neither shares a seed with training."""
    calib = json.loads((SHIPPED / "calibration.json").read_text())
    config = json.loads((SHIPPED / "config.json").read_text())
    assert calib["threshold"] == config["threshold"]  # the judge loads what was calibrated
    splits = calib["splits"]
    train, cal, report = (splits[k]["seeds"] for k in ("train", "calibration", "report"))
    assert train and cal and report
    # the recorded training seeds cover every stage of the checkpoint's history
    assert train == history_train_seeds(calib["train"])
    named = {"train": train, "calibration": cal, "report": report, "tests": TEST_SEEDS}
    named["development"] = development_seeds()  # where the checkpoint was chosen
    for a, b in combinations(named, 2):
        assert not seed_overlaps(named[a], named[b]), (a, b)
    assert calib["table_split"] == "calibration"
    # the report split is a second draw of the calibration split's recipe, wrong cubes included
    assert splits["report"]["kinds"] == splits["calibration"]["kinds"]
    assert splits["report"]["kinds"]["mujoco:arm_reach"]["wrong"] >= 8
    per_kind = calib["oracle_agreement_per_kind"]["mujoco:arm_reach"]
    assert per_kind["wrong"]["n_neg"] > 0
    assert per_kind["wrong"]["fpr"] <= WRONG_CUBE_MAX_FPR, per_kind["wrong"]
    per_env = calib["oracle_agreement_per_env"]
    assert sum(r["n_pos"] + r["n_neg"] for r in per_env.values()) == sum(
        calib["oracle_agreement"][k] for k in ("n_pos", "n_neg")
    )
    for env_id, (min_tpr, min_tnr) in REPORT_FLOORS.items():
        assert per_env[env_id]["roc_auc"] >= AUC_FLOOR, (env_id, per_env[env_id])
        assert per_env[env_id]["tpr"] >= min_tpr, (env_id, per_env[env_id])
        assert per_env[env_id]["tnr"] >= min_tnr, (env_id, per_env[env_id])


def test_judge_agrees_with_oracle_on_unseen_episodes(
    minijudge: MiniJudge,
    arm_demonstrations: list[LabelledDemonstration],
    wrong_cube_demonstrations: list[LabelledDemonstration],
) -> None:
    probs = np.concatenate([minijudge.score_batch(d.clips(4), d.task) for d in arm_demonstrations])
    labels = np.concatenate([d.labels for d in arm_demonstrations])
    assert probs[labels].mean() > probs[~labels].mean() + 0.3
    accuracy = ((probs >= minijudge.threshold) == labels).mean()
    assert accuracy > 0.8, accuracy  # seeds 40000+ were never trained on
    # wrong cube: every frame is a failure of the named task; the judge is known to fire
    # once the arm touches any cube, so this is a floor on how bad it may be, not a goal
    fired, approach = [], []
    for d in wrong_cube_demonstrations:
        assert not d.labels.any()
        arrived = first_env_success(d)  # the step the arm reaches the other cube
        assert arrived > 0
        hit = minijudge.score_batch(d.clips(4), d.task) >= minijudge.threshold
        fired.append(hit)
        approach.append(hit[:arrived])
    fpr, approach_fpr = (100 * float(np.concatenate(x).mean()) for x in (fired, approach))
    assert fpr <= WRONG_CUBE_MAX_FPR, fpr
    assert approach_fpr <= WRONG_CUBE_APPROACH_MAX_FPR, approach_fpr


def test_text_side_responds_to_wording(
    minijudge: MiniJudge, arm_demonstrations: list[LabelledDemonstration]
) -> None:
    task_p, far_p, template_p = [], [], []
    for demo in (d for d in arm_demonstrations if d.success):
        clips = demo.clips(4, np.flatnonzero(demo.labels).tolist())
        task_p.append(minijudge.score_batch(clips, demo.task))
        far_p.append(minijudge.score_batch(clips, "move the blue ball to the green goal"))
        template_p.append(
            minijudge.score_batch(
                clips,
                f"Evaluate the behavior of this robot. The robot was instructed with the "
                f"task: {demo.task}.",
            )
        )
    task, far, template = (np.concatenate(x) for x in (task_p, far_p, template_p))
    assert task.mean() > far.mean() + 0.2  # another task's instruction scores low
    # the wording of the instruction matters (in logits: confident scores saturate near 1)
    task, template = (np.clip(p, 1e-6, 1 - 1e-6) for p in (task, template))
    assert np.abs(np.log(task / (1 - task)) - np.log(template / (1 - template))).mean() > 0.2


def test_colour_word_binds_to_the_reached_cube(
    minijudge: MiniJudge, arm_demonstrations: list[LabelledDemonstration]
) -> None:
    """On success frames the instruction naming the reached cube beats every other colour."""
    right, wrong = [], []
    for demo in (d for d in arm_demonstrations if d.success):
        clips = demo.clips(4, np.flatnonzero(demo.labels).tolist())
        color = demo.task.split()[2]
        right.append(minijudge.score_batch(clips, demo.task))
        others = [
            minijudge.score_batch(clips, demo.task.replace(color, other))
            for other in {"red", "green", "blue", "yellow"} - {color}
        ]
        wrong.append(np.max(others, axis=0))
    r, w = np.concatenate(right), np.concatenate(wrong)
    assert (r > w).mean() > 0.8, (r.mean(), w.mean())
    assert r.mean() > w.mean() + 0.3


def test_flatten_head_roundtrip_and_config_errors(tmp_path: Path, minijudge: MiniJudge) -> None:
    """The plain dual-encoder head saves and loads too; bad architecture fields are refused."""
    cfg = MiniJudgeConfig(device="cpu", head="flatten", image_size=64, strides=(2, 2, 2))
    flat = MiniJudge(cfg, text_encoder=minijudge.text)
    flat.save_pretrained(tmp_path)
    again = MiniJudge.from_pretrained(tmp_path, device="cpu", text_encoder=minijudge.text)
    clip = np.random.default_rng(0).integers(0, 256, (5, 64, 64, 3), dtype=np.uint8)
    assert again.score(clip, "reach the red cube") == pytest.approx(
        flat.score(clip, "reach the red cube"), abs=1e-6
    )
    film = MiniJudge(MiniJudgeConfig(device="cpu", film_layer=0), text_encoder=minijudge.text)
    torch.nn.init.normal_(film.model.film.weight, std=0.5)  # type: ignore[union-attr]
    clip128 = np.random.default_rng(1).integers(0, 256, (5, 128, 128, 3), dtype=np.uint8)
    texts = ["reach the red cube", "reach the blue cube"]
    pixels = clips_to_pixels([clip128], 128)
    sent = minijudge.text.encode(texts)
    img = film.model.embed_images(pixels.expand(2, -1, -1, -1, -1), film.model.film_params(sent))
    assert not torch.allclose(img[0], img[1])  # the instruction shapes the image features
    film.save_pretrained(tmp_path / "film")
    again = MiniJudge.from_pretrained(tmp_path / "film", device="cpu", text_encoder=minijudge.text)
    np.testing.assert_allclose(
        again.score_batch([clip128] * 2, texts), film.score_batch([clip128] * 2, texts), atol=1e-6
    )
    with pytest.raises(ConfigError, match="film_layer=7"):
        MiniJudgeConfig(film_layer=7)
    with pytest.raises(ConfigError, match="head='mlp'"):
        MiniJudgeConfig(head="mlp")
    with pytest.raises(ConfigError, match=r"strides=\(2, 2\)"):
        MiniJudgeConfig(strides=(2, 2))
    with pytest.raises(ConfigError, match="image_size=100"):
        MiniJudgeConfig(image_size=100)


def test_batched_equals_single_and_save_load_roundtrip(
    tmp_path: Path, minijudge: MiniJudge, arm_demonstrations: list[LabelledDemonstration]
) -> None:
    clips = list(arm_demonstrations[0].clips(4, range(0, len(arm_demonstrations[0]), 7)))
    batched = minijudge.score_batch(clips, arm_demonstrations[0].task)
    single = np.array([minijudge.score(c, arm_demonstrations[0].task) for c in clips])
    np.testing.assert_allclose(batched, single, atol=1e-5)
    minijudge.save_pretrained(tmp_path / "ckpt")
    again = MiniJudge.from_pretrained(tmp_path / "ckpt", device="cpu", text_encoder=minijudge.text)
    np.testing.assert_allclose(
        again.score_batch(clips, arm_demonstrations[0].task), batched, atol=1e-6
    )
    assert again.threshold == pytest.approx(minijudge.threshold)


def test_checkpoint_errors(tmp_path: Path, minijudge: MiniJudge) -> None:
    with pytest.raises(CheckpointError, match="no config.json"):
        MiniJudge.from_pretrained(tmp_path)
    MiniJudgeConfig().save(tmp_path)
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        MiniJudge.from_pretrained(tmp_path)
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(2)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match="does not fit"):
        MiniJudge.from_pretrained(tmp_path, text_encoder=minijudge.text)


def test_preprocessing_resizes_on_uint8(rng: np.random.Generator) -> None:
    clips = [rng.integers(0, 256, (5, 128, 96, 3), dtype=np.uint8) for _ in range(2)]
    x = clips_to_pixels(clips, 64)
    assert x.shape == (2, 5, 3, 64, 64) and x.dtype == torch.float32
    assert float(x.min()) >= -0.5 and float(x.max()) <= 0.5
    flat = np.full((5, 128, 128, 3), 200, np.uint8)
    assert torch.allclose(clips_to_pixels([flat], 64), torch.tensor(200 / 255 - 0.5), atol=1e-6)
