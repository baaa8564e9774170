"""The judge's training script end to end on a few real rendered episodes: train, save,
then fine-tune from the result with --steps 0 (recalibrate only)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.torch import load_file

from embodied.rewards.minijudge import MiniJudge
from embodied.rewards.minijudge.train_minijudge import main

SMALL = ["--n-arm", "2", "--n-ball", "2", "--n-val", "2", "--extra-arm-experts", "0"]
SMALL += ["--image-size", "64", "--batch", "16"]


def test_train_then_recalibrate_from_init(tmp_path: Path) -> None:
    first = tmp_path / "first"
    calib = main(["--out", str(first), "--steps", "3", "--swap-arm", "2", *SMALL])
    saved = json.loads((first / "calibration.json").read_text())
    assert saved["threshold"] == calib["threshold"]
    assert {"mujoco:arm_reach", "mujoco:reach_around"} <= set(saved["oracle_agreement_per_kind"])
    assert saved["train"]["episodes"] == 2 + 2 + 2  # arm, ball and the swap pair
    assert "--swap-arm 2" in saved["train"]["command"]
    judge = MiniJudge.from_pretrained(first, device="cpu")
    assert judge.config.image_size == 64

    again = tmp_path / "again"
    main(["--out", str(again), "--init", str(first), "--steps", "0", *SMALL])
    before, after = (
        load_file(str(first / "model.safetensors")),
        load_file(str(again / "model.safetensors")),
    )
    assert before.keys() == after.keys()
    assert all(np.array_equal(before[k].numpy(), after[k].numpy()) for k in before)  # no step
    history = json.loads((again / "calibration.json").read_text())["train"]
    assert history["steps"] == 0 and history["from"]["steps"] == 3
