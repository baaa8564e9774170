"""The options of ``embodied train minijudge`` (:class:`MiniJudgeTrainConfig`), apart from the
training code so that the command line is built without importing torch.

:mod:`embodied.apps.training.training_minijudge` re-exports every name here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar

from embodied.config import Rule, checked, validate

ARM, BALL = "mujoco:arm_reach", "mujoco:reach_around"
EXTRA_SOURCES = (  # (config field, env, cache name, first reset seed, kinds) of extra data
    ("extra_arm_experts", ARM, "extra_arm", 9000, ("expert",)),
    ("wrong_arm", ARM, "wrong", 11000, ("wrong",)),
    ("swap_arm", ARM, "swap_arm", 12000, ("swap",)),
    ("extra_ball_experts", BALL, "extra_ball", 9000, ("expert",)),
)

DEVELOPMENT_MIN_TNR = 98.0
"""TNR floor (percent, every task) of :func:`select_minijudge`'s candidates: 3 points above
the 95 % the judge must keep on held-out frames, for the sampling error of a few thousand
correlated frames per task, and because each false positive is a false reward in RL."""


@dataclass(frozen=True)
class MiniJudgeTrainConfig:
    """One run of :func:`train_minijudge` (the options of ``embodied train minijudge``).

    Folders (``out``, ``init``, ``cache``) may be given as paths; they are stored as str.

    Args:
        out: Checkpoint folder to write.
        n_arm: arm_reach training episodes.
        n_ball: reach_around training episodes.
        n_val: Episodes per task in each of the calibration and report splits.
        n_wrong_val: Wrong-cube arm_reach episodes in each of the calibration and report splits.
        steps: Optimizer steps (0 with ``init``: recalibrate its weights unchanged).
        batch: Pairs per step.
        lr: Peak learning rate (one-cycle schedule).
        stride: Frames between training clips.
        seed: Random seed; also offsets the first reset seed of every split.
        extra_arm_experts: Additional arm_reach expert episodes (positives are rare).
        wrong_arm: arm_reach episodes where the expert reaches another cube than named.
        swap_arm: arm_reach expert episodes in groups of 4 over one layout, colours rotated.
        extra_ball_experts: Additional reach_around expert episodes (more arrivals to learn the
            goal radius from).
        init: Checkpoint folder to start from (fine-tune or recalibrate).
        image_size: Judge input side in pixels (ignored with ``init``).
        head: Image head: cells or flatten (ignored with ``init``).
        film_layer: FiLM conv index (-1: off).
        cell_weight: Weight of the cell supervision (our extension; 0: off). For the task
            instruction and the same instruction naming another object, the cell under the
            fingertip (ball) - projected from sim state - must give the label and the cells
            away from it must say no, so the judge decides "reached the red cube" where the
            fingertip is instead of anywhere in the image (colour binding).
        arrival_weight: Batch share of the arrival frames (our extension; 0: off): the task
            instruction on the first two success frames of each episode and on the two frames
            before them, each side drawn with this weight (the task pools have 2). A rollout
            that stops at success ends on such a frame, and a long hold otherwise outnumbers
            it, which teaches a goal radius smaller than the simulator's.
        arrival_negative_weight: Batch share of the two frames before each arrival (our
            extension; None: ``arrival_weight``). Frames a step either side of the goal radius
            look nearly the same, so drawing both sides equally often leaves the boundary
            where the simulator puts it only on average; 0 draws the success side alone,
            which moves the judge's boundary outward by about a frame (the frames before
            arrival stay in the ordinary negative pools).
        threshold_tnr: Threshold rule (our extension; None: the highest TPR + TNR over the
            calibration split's frames). A fraction in (0, 1): the lowest threshold at which
            each task keeps this TNR on the calibration split's frames, spending the rest of
            the false-positive budget on the arrival frames at the goal's edge.
        threads: torch CPU threads for training.
        cache: Folder to cache recorded episodes in (npz).
        checkpoint_every: Optimizer steps between resumable training states in ``out``
            (``train_state.json``; ``embodied train minijudge --resume`` continues from the
            last one, and its next steps equal an uninterrupted run's).
    """

    config_name: ClassVar[str] = "minijudge training"

    out: str = checked(min_len=1, fix="name a checkpoint folder, e.g. out='runs/judge'")
    n_arm: int = checked(48, ge=0, fix="set n_arm to 0 or more")
    n_ball: int = checked(32, ge=0, fix="set n_ball to 0 or more")
    n_val: int = checked(24, ge=1, fix="set n_val to 1 or more")
    n_wrong_val: int = checked(12, ge=0, fix="set n_wrong_val to 0 or more")
    steps: int = checked(1500, ge=0, fix="set steps to 0 or more")
    batch: int = checked(128, ge=1, fix="set batch to 1 or more")
    lr: float = checked(2e-3, gt=0, fix="e.g. lr=2e-3")
    stride: int = checked(2, ge=1, fix="set stride to 1 or more")
    seed: int = checked(0, ge=0, fix="set seed to 0 or more")
    extra_arm_experts: int = checked(32, ge=0, fix="set extra_arm_experts to 0 or more")
    wrong_arm: int = checked(0, ge=0, fix="set wrong_arm to 0 or more")
    swap_arm: int = checked(0, ge=0, fix="set swap_arm to 0 or more")
    extra_ball_experts: int = checked(0, ge=0, fix="set extra_ball_experts to 0 or more")
    init: str | None = None
    image_size: int = 128
    head: str = "cells"
    film_layer: int = -1
    cell_weight: float = checked(0.0, ge=0, fix="e.g. cell_weight=1")
    arrival_weight: float = checked(0.0, ge=0, fix="e.g. arrival_weight=1")
    arrival_negative_weight: float | None = checked(
        None, ge=0, fix="e.g. arrival_negative_weight=1, or None to follow arrival_weight"
    )
    threshold_tnr: float | None = checked(
        None, gt=0, lt=1, fix="e.g. threshold_tnr=0.99, or leave it unset for the TPR + TNR rule"
    )
    threads: int = checked(1, ge=1, fix="set threads to 1 or more")
    cache: str | None = None
    checkpoint_every: int = checked(250, ge=1, fix="set checkpoint_every to 1 or more")

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "cell_weight",
            lambda c: c.cell_weight == 0 or c.head == "cells",
            "needs head 'cells', got {head!r}",
            "use head=cells or cell_weight=0",
        ),
        Rule(
            "steps",
            lambda c: (
                c.steps == 0 or c.n_arm + c.n_ball + sum(getattr(c, s[0]) for s in EXTRA_SOURCES)
            ),
            "with no training episodes (n_arm, n_ball and the extra episode counts are all 0)",
            "record some, e.g. n_arm=48, or recalibrate with steps=0 and init",
        ),
    )

    def __post_init__(self) -> None:
        for key in ("out", "init", "cache"):  # folders given as paths are stored as str
            if getattr(self, key) is not None:
                object.__setattr__(self, key, os.fspath(getattr(self, key)))
        validate(self)
        # the judge architecture's own checks (head, image_size, film_layer name their key);
        # imported here so that `embodied train --help` does not load torch
        from embodied.rewards.minijudge.configuration_minijudge import MiniJudgeConfig

        MiniJudgeConfig(
            device="cpu", head=self.head, image_size=self.image_size, film_layer=self.film_layer
        )
