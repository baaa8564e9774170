"""The judge's training (``embodied train minijudge``) end to end on a few real rendered
episodes: train, save, then fine-tune from the result with steps=0 (recalibrate only); and the
recorded command lines of a checkpoint's training history read back."""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.torch import load_file

from embodied.apps.training.training_minijudge import (
    MiniJudgeTrainConfig,
    _cached,
    command_line,
    evaluate,
    history_train_seeds,
    parse_command,
    seed_overlaps,
    select_minijudge,
    train_minijudge,
    train_seeds,
)
from embodied.errors import CheckpointError, ConfigError
from embodied.rewards.calibration import best_threshold, rates, tnr_threshold
from embodied.rewards.minijudge import SHIPPED, MiniJudge

SMALL: dict[str, Any] = {"n_arm": 2, "n_ball": 2, "n_val": 2, "n_wrong_val": 1}
SMALL |= {"extra_arm_experts": 0, "image_size": 64, "batch": 16}


def main(out: Path, **options: Any) -> dict[str, Any]:
    """Train a small judge into ``out``: ``SMALL`` and ``options`` over the defaults."""
    return train_minijudge(MiniJudgeTrainConfig(out=str(out), **{**SMALL, **options}))


def _split(cache: Path, name: str) -> list[Any]:
    """The episodes of a split the run cached (recording them again would be a new draw)."""
    (path,) = cache.glob(f"{name}_*.json")

    def missing() -> list[Any]:
        raise AssertionError(f"{path} was not cached")

    return _cached(str(cache), path.stem, missing)


def test_train_then_recalibrate_from_init(tmp_path: Path) -> None:
    first, cache = tmp_path / "first", tmp_path / "cache"
    calib = main(first, steps=3, swap_arm=2, cache=str(cache))
    saved = json.loads((first / "calibration.json").read_text())
    assert saved["threshold"] == calib["threshold"]
    assert {"mujoco:arm_reach", "mujoco:reach_around"} <= set(saved["oracle_agreement_per_kind"])
    assert "wrong" in saved["oracle_agreement_per_kind"]["mujoco:arm_reach"]
    assert saved["train"]["episodes"] == 2 + 2 + 2  # arm, ball and the swap pair
    # the command line that made it, which reads back to the recorded config
    assert saved["train"]["command"].startswith("embodied train minijudge --out ")
    assert "--swap-arm 2" in saved["train"]["command"]
    config = MiniJudgeTrainConfig(**saved["train"]["config"])
    assert (config.steps, config.swap_arm, config.n_arm) == (3, 2, 2)
    assert parse_command(saved["train"]["command"]) == config
    judge = MiniJudge.from_pretrained(first, device="cpu")
    assert judge.config.image_size == 64

    # training, calibration and report seeds are recorded and pairwise disjoint
    splits = {k: saved["splits"][k]["seeds"] for k in ("train", "calibration", "report")}
    assert splits["train"] == {
        "mujoco:arm_reach": [[0, 1], [12000, 12001]],
        "mujoco:reach_around": [[0, 1]],
    }
    assert splits["calibration"]["mujoco:arm_reach"] == [[5000, 5001], [5002, 5002]]
    assert splits["report"]["mujoco:arm_reach"] == [[6000, 6001], [6002, 6002]]
    for a, b in combinations(splits, 2):
        assert not seed_overlaps(splits[a], splits[b]), (a, b)

    # the threshold is the calibration split's best; the agreement is the report split's
    cal, report = _split(cache, "calibration"), _split(cache, "report")
    assert len(cal) == len(report) == 2 + 2 + 1
    ev_cal, ev_report = evaluate(judge, cal), evaluate(judge, report)
    expected = float(np.clip(best_threshold(ev_cal["probs"], ev_cal["labels"]), 0.05, 0.95))
    assert saved["threshold"] == pytest.approx(expected, abs=1e-6)
    agreement = rates(ev_report["probs"] >= saved["threshold"], ev_report["labels"]).to_dict()
    assert saved["oracle_agreement"] == pytest.approx(agreement)
    assert saved["oracle_agreement"]["n_neg"] == sum(int((~d.labels).sum()) for d in report)

    again = tmp_path / "again"
    main(again, init=str(first), steps=0)
    before, after = (
        load_file(str(first / "model.safetensors")),
        load_file(str(again / "model.safetensors")),
    )
    assert before.keys() == after.keys()
    assert all(np.array_equal(before[k].numpy(), after[k].numpy()) for k in before)  # no step
    # the weights file itself is untouched, byte for byte
    assert (first / "model.safetensors").read_bytes() == (again / "model.safetensors").read_bytes()
    recal = json.loads((again / "calibration.json").read_text())
    history = recal["train"]
    assert history["steps"] == 0 and history["from"]["steps"] == 3
    assert history["episodes"] == 0 and history["seeds"] == {}  # nothing trained on
    # the recalibrated checkpoint still records the seeds its weights were trained on
    assert recal["splits"]["train"]["seeds"] == splits["train"]

    # the TNR-target rule: the lowest threshold keeping each task's calibration TNR >= 90 %
    target = tmp_path / "target"
    by_tnr = main(target, init=str(first), steps=0, threshold_tnr=0.9, cache=str(cache))
    expected = tnr_threshold(ev_cal["probs"], ev_cal["labels"], ev_cal["envs"], 0.9)
    assert by_tnr["threshold"] == pytest.approx(max(expected, 0.05), abs=1e-6)
    assert by_tnr["threshold_rule"].startswith("lowest threshold keeping each task's TNR >= 90 %")
    for env_id in ("mujoco:arm_reach", "mujoco:reach_around"):
        m = ev_cal["envs"] == env_id
        tnr = rates(ev_cal["probs"][m] >= by_tnr["threshold"], ev_cal["labels"][m]).tnr
        assert tnr >= 90.0, (env_id, tnr)
    assert "--threshold-tnr 0.9" in by_tnr["train"]["command"]
    assert json.loads((target / "config.json").read_text())["threshold"] == by_tnr["threshold"]


class _Killed(Exception):
    """Stands for the process dying right after a training state was written."""


def test_fine_tune_from_init_trains_from_its_weights(tmp_path: Path) -> None:
    # the init checkpoint's weights once overwrote the resume state, so _train read them as
    # a training state and raised KeyError: fine-tuning (steps > 0) could not run
    first, tuned, cache = tmp_path / "first", tmp_path / "tuned", tmp_path / "cache"
    main(first, steps=3, cache=str(cache))
    calib = main(tuned, init=str(first), steps=2, cache=str(cache))
    assert calib["train"]["steps"] == 2 and calib["train"]["from"]["steps"] == 3
    before, after = (
        load_file(str(first / "model.safetensors")),
        load_file(str(tuned / "model.safetensors")),
    )
    assert before.keys() == after.keys()
    assert not all(np.array_equal(before[k].numpy(), after[k].numpy()) for k in before)


def test_resume_continues_bitwise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Killed after the state at step 4, rerun with --resume: the same weights as a run never
    stopped. steps=10 is also the regression case of OneCycleLR's division by zero (10 % warm-up
    is exactly one step)."""
    import embodied.apps.training.training_minijudge as tm

    cache = str(tmp_path / "cache")
    options = {"steps": 10, "checkpoint_every": 4, "cache": cache}
    main(tmp_path / "whole", **options)
    save = tm._save_train_state

    def save_then_die(*args: Any) -> None:
        save(*args)
        if args[2] == 4:
            raise _Killed

    monkeypatch.setattr(tm, "_save_train_state", save_then_die)
    with pytest.raises(_Killed):
        main(tmp_path / "cut", **options)
    monkeypatch.setattr(tm, "_save_train_state", save)
    state = json.loads((tmp_path / "cut" / "train_state.json").read_text())
    assert state["step"] == 4 and not (tmp_path / "cut" / "model.safetensors").exists()
    # a plain rerun would train over the run: refused with the fix
    with pytest.raises(ConfigError, match="add --resume"):
        main(tmp_path / "cut", **options)
    # other options than the run's: refused, naming them
    with pytest.raises(ConfigError, match=r"lr 0.002 -> 0.001"):
        train_minijudge(
            MiniJudgeTrainConfig(out=str(tmp_path / "cut"), **{**SMALL, **options, "lr": 1e-3}),
            resume=True,
        )
    train_minijudge(
        MiniJudgeTrainConfig(out=str(tmp_path / "cut"), **{**SMALL, **options}),
        resume=True,
    )
    whole = load_file(str(tmp_path / "whole" / "model.safetensors"))
    cut = load_file(str(tmp_path / "cut" / "model.safetensors"))
    assert whole.keys() == cut.keys()
    assert all(np.array_equal(whole[k].numpy(), cut[k].numpy()) for k in whole)
    with pytest.raises(CheckpointError, match="nothing to resume"):
        train_minijudge(MiniJudgeTrainConfig(out=str(tmp_path / "new"), **SMALL), resume=True)


def test_overlapping_splits_and_unreadable_history_are_refused(tmp_path: Path) -> None:
    # 5001 arm_reach training episodes would run into the calibration seeds (5000...)
    with pytest.raises(ConfigError, match=r"train and calibration episodes share reset seeds"):
        main(tmp_path / "x", n_arm=5001)
    assert not (tmp_path / "x").exists()
    with pytest.raises(ConfigError, match=r"calibration and report.*\[5000, 6099\]"):
        main(tmp_path / "x", n_val=1100, steps=0)
    history = {
        "steps": 0,  # a recalibration records no seeds of its own
        "from": {"steps": 9, "command": "python -m x.train_minijudge --out D --n-arm 3"},
    }
    assert history_train_seeds(history) == {
        "mujoco:arm_reach": [[0, 2], [9000, 9031]],
        "mujoco:reach_around": [[0, 31]],
    }
    with pytest.raises(CheckpointError, match="records neither its seeds"):
        history_train_seeds({"steps": 5, "command": "my_own_trainer --epochs 3"})
    with pytest.raises(CheckpointError, match="does not read.*--n-arm"):
        history_train_seeds({"steps": 5, "command": "python -m x.train_minijudge --n-arm"})
    with pytest.raises(CheckpointError, match="does not read"):  # no --out
        history_train_seeds({"steps": 5, "command": "embodied train minijudge --n-arm 3"})


def test_recorded_command_line_reads_back() -> None:
    """The recorded ``embodied train minijudge ...`` line gives back its config and seeds."""
    config = MiniJudgeTrainConfig(
        out="runs/j k", n_arm=3, lr=1e-3, seed=7, swap_arm=4, init="CELLS", film_layer=0,
        extra_ball_experts=5, arrival_weight=0.5,
    )  # fmt: skip
    command = command_line(config)
    assert command.startswith("embodied train minijudge --out 'runs/j k' --n-arm 3 ")
    assert "--cache" not in command  # None: not on the command line
    assert parse_command(command) == config
    assert parse_command(".venv/bin/" + command) == config
    assert parse_command(command.replace("embodied train", "python -m embodied train")) == config
    assert history_train_seeds({"steps": 5, "command": command}) == train_seeds(config)
    assert train_seeds(config)["mujoco:arm_reach"] == [[7, 9], [9007, 9038], [12007, 12010]]
    assert train_seeds(config)["mujoco:reach_around"] == [[7, 38], [9007, 9011]]
    # the old module form, --flag=value and options of earlier versions
    old = "python -m a.train_minijudge --out D --n-arm=3 --gone 1 --lr 1e-3 --seed 7 --init CELLS"
    assert parse_command(old) == MiniJudgeTrainConfig(
        out="D", n_arm=3, lr=1e-3, seed=7, init="CELLS"
    )
    assert parse_command("embodied train pdp --out D") is None


def test_augment_moves_keypoints_with_the_image() -> None:
    import torch

    from embodied.apps.training.training_minijudge import _augment

    side = 32
    x = torch.full((8, 2, 3, side, side), -0.5)
    uv = torch.tensor([[3.5 + i, 20.5 - i] for i in range(8)])
    for i, (u, v) in enumerate(uv.tolist()):
        x[i, :, :, int(v), int(u)] = 0.5
    out, moved = _augment(x, np.random.default_rng(3), uv.clone())
    assert moved is not None
    for i in range(8):
        v, u = np.unravel_index(int(out[i, 0, 0].argmax()), (side, side))
        assert (u, v) == (int(moved[i, 0]), int(moved[i, 1])), i


def test_cell_loss_rewards_the_keypoint_cell_and_only_it() -> None:
    import torch

    from embodied.apps.training.training_minijudge import cell_loss

    side, size = 8, 64
    uv = torch.tensor([[20.0, 44.0]])  # cell (row 5, column 2)
    at_keypoint = torch.full((1, side, side), -8.0)
    at_keypoint[0, 5, 2] = 8.0
    elsewhere = torch.full((1, side, side), -8.0)
    elsewhere[0, 0, 7] = 8.0
    silent = torch.full((1, side * side), -8.0)

    def loss(cells: torch.Tensor, y: float) -> float:
        return float(cell_loss(cells.reshape(1, -1), uv, torch.tensor([y]), size))

    assert loss(at_keypoint, 1.0) < 0.1 < loss(at_keypoint, 0.0)
    assert loss(silent, 0.0) < 0.01 < 1.0 < loss(elsewhere, 1.0)
    assert loss(elsewhere, 0.0) > loss(silent, 0.0) + 0.05  # a far cell saying yes costs


def test_cell_supervised_training_runs_and_is_recorded(tmp_path: Path) -> None:
    calib = main(tmp_path / "cells", steps=2, cell_weight=1.0)
    assert calib["train"]["config"]["cell_weight"] == 1.0
    assert "--cell-weight 1.0" in calib["train"]["command"]
    arrival = calib["arrival_agreement_per_env"]["mujoco:arm_reach"]
    assert arrival["n_arrival"] > 0 and 0 <= arrival["arrival_tpr"] <= 100
    assert arrival["n_neg"] > 0 and 0 <= arrival["tnr"] <= 100
    with pytest.raises(ConfigError, match="cell_weight"):
        MiniJudgeTrainConfig(out="x", cell_weight=-1.0)
    with pytest.raises(ConfigError, match="cell_weight"):
        MiniJudgeTrainConfig(out="x", cell_weight=1.0, head="flatten")


def test_arrival_pool_holds_every_boundary_frame() -> None:
    """With ``arrival_weight`` the frames around each first success are all trained on, whatever
    the stride, and drawn with their share of the batch; without it the pairs are as before."""
    from embodied.apps.training.data_minijudge import arrival_steps, record_episodes
    from embodied.apps.training.training_minijudge import TASK, PairSet

    episodes = record_episodes("mujoco:reach_around", 2, 40, kinds=("expert",), image_size=32)
    plain = PairSet(episodes, 32, stride=5, seed=0)
    pairs = PairSet(episodes, 32, stride=5, seed=0, arrival_weight=3.0)
    n_plain = len(plain.label)
    # the plain pairs come first, unchanged (same captions drawn from the same seed)
    assert np.array_equal(pairs.episode[:n_plain], plain.episode)
    assert np.array_equal(pairs.step[:n_plain], plain.step)
    assert np.array_equal(pairs.label[:n_plain], plain.label)
    assert not plain.arrival[plain.step % 5 != 0].any()
    for i, d in enumerate(episodes):
        near = arrival_steps(d, before=2, after=2)
        assert len(near) == 4 and d.labels[near[2]] and not d.labels[near[1]]
        task_rows = (pairs.episode == i) & (pairs.kind == TASK)
        assert sorted(set(pairs.step[task_rows & pairs.arrival].tolist())) == near
        assert set(pairs.step[task_rows & ~pairs.arrival].tolist()).isdisjoint(near)
    # two arrival pools (success, not yet) of weight 3 each next to the task pools' 2 + 2 and
    # the other captions' 1 + 1 (this env has no wrong-object captions)
    arrival_pools = [
        w for p, w in zip(pairs.pools, pairs.weights, strict=True) if pairs.arrival[p].all()
    ]
    assert arrival_pools == pytest.approx([3 / 12, 3 / 12])
    idx = pairs.batch(2000, np.random.default_rng(0))
    expected = sum(
        w * pairs.arrival[p].mean() for p, w in zip(pairs.pools, pairs.weights, strict=True)
    )
    assert pairs.arrival[idx].mean() == pytest.approx(expected, abs=0.04)
    assert expected > 0.5 > plain.arrival[plain.batch(2000, np.random.default_rng(0))].mean()


def test_arrival_negative_weight_sets_the_pre_arrival_share() -> None:
    """``arrival_negative_weight`` weighs the frames before each arrival on their own: 0 drops
    their pool (they stay in the ordinary negative pools), None keeps ``arrival_weight``."""
    from embodied.apps.training.data_minijudge import record_episodes
    from embodied.apps.training.training_minijudge import PairSet

    episodes = record_episodes("mujoco:reach_around", 2, 40, kinds=("expert",), image_size=32)

    def arrival_pools(pairs: PairSet) -> list[tuple[bool, float]]:
        return [
            (bool(pairs.label[p][0]), float(w))
            for p, w in zip(pairs.pools, pairs.weights, strict=True)
            if pairs.arrival[p].all()
        ]

    same = PairSet(episodes, 32, stride=5, seed=0, arrival_weight=3.0)
    assert arrival_pools(same) == [(True, pytest.approx(3 / 12)), (False, pytest.approx(3 / 12))]
    pos_only = PairSet(
        episodes, 32, stride=5, seed=0, arrival_weight=3.0, arrival_negative_weight=0
    )
    assert arrival_pools(pos_only) == [(True, pytest.approx(3 / 9))]
    # the frames before arrival are still drawn, as ordinary negatives of the task instruction
    before = pos_only.arrival & ~pos_only.label
    assert before.any()
    drawn = pos_only.batch(4000, np.random.default_rng(0))
    assert 0 < before[drawn].mean() < before[same.batch(4000, np.random.default_rng(0))].mean()
    half = PairSet(episodes, 32, stride=5, seed=0, arrival_weight=2.0, arrival_negative_weight=1)
    assert arrival_pools(half) == [(True, pytest.approx(2 / 9)), (False, pytest.approx(1 / 9))]
    with pytest.raises(ConfigError, match="arrival_negative_weight"):
        MiniJudgeTrainConfig(out="x", arrival_negative_weight=-1.0)


def test_selection_uses_only_unseen_development_episodes(tmp_path: Path) -> None:
    """Candidates are compared on arrival frames of development episodes at their own
    thresholds, among those keeping the TNR floor on every task; a candidate whose splits
    include a development seed is refused (exit 2)."""
    from typer.testing import CliRunner

    from embodied.apps.cli import app

    strict = tmp_path / "strict"  # the shipped weights with an unreachable threshold
    strict.mkdir()
    for name in ("model.safetensors", "calibration.json"):
        (strict / name).write_bytes((SHIPPED / name).read_bytes())
    config = json.loads((SHIPPED / "config.json").read_text())
    (strict / "config.json").write_text(json.dumps({**config, "threshold": 0.999999}))
    lenient = tmp_path / "lenient"  # calls every frame success: no misses, TNR 0
    lenient.mkdir()
    for name in ("model.safetensors", "calibration.json"):
        (lenient / name).write_bytes((SHIPPED / name).read_bytes())
    (lenient / "config.json").write_text(json.dumps({**config, "threshold": 1e-9}))
    cache = str(tmp_path / "dev")
    # a floor the shipped judge keeps on any draw: on two development episodes per task its
    # worst TNR moves with the platform's rendering, around the 98 % default
    result = select_minijudge([strict, SHIPPED, lenient], cache, n_val=2, n_ball=2, min_tnr=50)
    assert result["development_seeds"] == {  # split and extra experts apart: none counts twice
        "mujoco:arm_reach": [[70000, 70001]],
        "mujoco:reach_around": [[70000, 70001], [71000, 71001]],
    }
    strict_row, shipped_row, lenient_row = result["candidates"]
    assert (lenient_row["arrival_missed"], lenient_row["worst_tnr"]) == (0, 0.0)
    assert result["min_tnr"] == 50.0  # the lenient one is below the TNR floor
    assert shipped_row["worst_tnr"] >= 50.0
    assert strict_row["threshold"] == pytest.approx(0.999999)
    n_arrival = sum(v["n_arrival"] for v in shipped_row.values() if isinstance(v, dict))
    assert n_arrival > 0
    assert strict_row["arrival_missed"] == n_arrival  # nothing scores 0.999999
    assert shipped_row["arrival_missed"] < n_arrival
    assert result["chosen"] == str(SHIPPED)
    # between the two extremes, the floor alone decides
    floored = select_minijudge([strict, lenient], cache, n_val=2, n_ball=2)
    assert floored["min_tnr"] == 98.0
    assert floored["chosen"] == str(strict)  # the only one keeping TNR >= 98 %
    floorless = select_minijudge([strict, lenient], cache, n_val=2, n_ball=2, min_tnr=0)
    assert floorless["chosen"] == str(lenient)  # fewest misses
    with pytest.raises(ConfigError, match="min_tnr 120"):
        select_minijudge([SHIPPED], cache, n_val=2, n_ball=2, min_tnr=120)

    calib = json.loads((SHIPPED / "calibration.json").read_text())
    calib["splits"]["report"]["seeds"]["mujoco:reach_around"].append([70001, 70001])
    (strict / "calibration.json").write_text(json.dumps(calib))
    with pytest.raises(ConfigError, match="report seeds include development seeds"):
        select_minijudge([strict], n_val=2, n_ball=2)
    run = CliRunner().invoke(app, ["train", "minijudge-select", str(strict)])
    assert run.exit_code == 2, run.output
    assert "development seeds" in run.output


def test_development_sets_share_no_episode() -> None:
    from embodied.apps.training.training_minijudge import (
        DEVELOPMENT_N_VAL,
        development_seeds,
    )

    seeds = development_seeds()
    assert seeds["mujoco:reach_around"] == [[70000, 70000 + DEVELOPMENT_N_VAL - 1], [71000, 71095]]
    with pytest.raises(ConfigError, match="development split and development experts"):
        development_seeds(n_val=1001)  # the split would run into the experts' seeds


@pytest.mark.parametrize("damage", ["truncate_meta", "truncate_frames", "meta_not_a_list"])
def test_a_damaged_episode_cache_is_recorded_again(damage: str, tmp_path: Path) -> None:
    from embodied.rewards.demo2reward.demonstrations import LabelledDemonstration

    calls: list[int] = []

    def make() -> list[LabelledDemonstration]:
        calls.append(1)
        frames = np.zeros((3, 8, 8, 3), np.uint8)
        return [LabelledDemonstration(frames, np.array([False, True, True]), "reach", "e:x")]

    first = _cached(str(tmp_path), "split", make)
    frames_path, meta_path = tmp_path / "split.npz", tmp_path / "split.json"
    if damage == "truncate_meta":
        meta_path.write_bytes(meta_path.read_bytes()[:10])
    elif damage == "truncate_frames":
        frames_path.write_bytes(frames_path.read_bytes()[:40])
    else:
        meta_path.write_text('{"task": "reach"}')
    again = _cached(str(tmp_path), "split", make)
    assert len(calls) == 2  # recorded again instead of a traceback
    assert again[0].task == first[0].task and np.array_equal(again[0].frames, first[0].frames)
    # and the rewritten cache reads back without recording
    _cached(str(tmp_path), "split", make)
    assert len(calls) == 2


def test_checkpoint_seeds_names_a_calibration_without_seeds(tmp_path: Path) -> None:
    from embodied.apps.training.training_minijudge import checkpoint_seeds

    (tmp_path / "calibration.json").write_text('{"train": {}, "splits": {"calibration": 3}}')
    with pytest.raises(CheckpointError, match="calibration.json.*does not record its seeds"):
        checkpoint_seeds(tmp_path)
