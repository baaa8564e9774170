"""The options of ``embodied train minijudge`` (:class:`MiniJudgeTrainConfig`), apart from the
training code so that the command line is built without importing torch.

:mod:`embodied.apps.training.training_minijudge` re-exports every name here.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from embodied.errors import ConfigError

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

    out: str
    n_arm: int = 48
    n_ball: int = 32
    n_val: int = 24
    n_wrong_val: int = 12
    steps: int = 1500
    batch: int = 128
    lr: float = 2e-3
    stride: int = 2
    seed: int = 0
    extra_arm_experts: int = 32
    wrong_arm: int = 0
    swap_arm: int = 0
    extra_ball_experts: int = 0
    init: str | None = None
    image_size: int = 128
    head: str = "cells"
    film_layer: int = -1
    cell_weight: float = 0.0
    arrival_weight: float = 0.0
    arrival_negative_weight: float | None = None
    threshold_tnr: float | None = None
    threads: int = 1
    cache: str | None = None
    checkpoint_every: int = 250

    def __post_init__(self) -> None:
        for key in ("out", "init", "cache"):  # folders given as paths are stored as str
            if getattr(self, key) is not None:
                object.__setattr__(self, key, os.fspath(getattr(self, key)))
        if not self.out:
            raise ConfigError("out '' must name a checkpoint folder", fix="e.g. out='runs/judge'")
        at_least = dict.fromkeys(["n_val", "batch", "stride", "threads", "checkpoint_every"], 1)
        at_least |= dict.fromkeys(["n_arm", "n_ball", "n_wrong_val", "steps", "seed"], 0)
        at_least |= {source[0]: 0 for source in EXTRA_SOURCES}
        for key, least in at_least.items():
            if getattr(self, key) < least:
                raise ConfigError(
                    f"{key} {getattr(self, key)!r} must be >= {least}",
                    fix=f"set {key} to {least} or more",
                )
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ConfigError(f"lr {self.lr!r} must be a positive number", fix="e.g. lr=2e-3")
        for key in ("cell_weight", "arrival_weight", "arrival_negative_weight"):
            value = getattr(self, key)
            if value is None:  # arrival_negative_weight: follow arrival_weight
                continue
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"{key} {value!r} must be a number >= 0", fix=f"e.g. {key}=1")
        if self.threshold_tnr is not None and not 0.0 < self.threshold_tnr < 1.0:
            raise ConfigError(
                f"threshold_tnr {self.threshold_tnr!r} must be a fraction in (0, 1)",
                fix="e.g. threshold_tnr=0.99, or leave it unset for the TPR + TNR rule",
            )
        if self.cell_weight > 0 and self.head != "cells":
            raise ConfigError(
                f"cell_weight {self.cell_weight} needs head 'cells', got {self.head!r}",
                fix="use head=cells or cell_weight=0",
            )
        extra = sum(getattr(self, s[0]) for s in EXTRA_SOURCES)
        if self.steps > 0 and self.n_arm + self.n_ball + extra == 0:
            raise ConfigError(
                f"steps {self.steps} with no training episodes (n_arm, n_ball and the extra "
                "episode counts are all 0)",
                fix="record some, e.g. n_arm=48, or recalibrate with steps=0 and init",
            )
        # the judge architecture's own checks (head, image_size, film_layer name their key);
        # imported here so that `embodied train --help` does not load torch
        from embodied.rewards.minijudge.configuration_minijudge import MiniJudgeConfig

        MiniJudgeConfig(
            device="cpu", head=self.head, image_size=self.image_size, film_layer=self.film_layer
        )
