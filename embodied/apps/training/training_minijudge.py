"""Train the shipped judge: ``embodied train minijudge --out DIR``.

In Python: ``train_minijudge(MiniJudgeTrainConfig(out=DIR))``; the command's options are the
fields of :class:`MiniJudgeTrainConfig`.

1. Record MuJoCo episodes (expert, near-miss, blocked, random) and caption every frame from
   sim state (:mod:`~embodied.apps.training.data_minijudge`).
2. Embed each distinct caption once with the frozen MiniLM text tower (cached).
3. Train the CNN image tower, text projection head, scale and bias with a sigmoid (SigLIP-
   style) loss on (clip, caption, is-true) pairs, balanced between true and false captions.
4. Choose the decision threshold on a calibration split of unseen episodes, report the
   oracle agreement on a disjoint report split (other reset seeds; both hold wrong-cube
   episodes) and save ``config.json``, ``model.safetensors`` and ``calibration.json``, which
   records the reset seeds of training, calibration and report (disjoint, checked).

``--init DIR --steps 0`` recalibrates a checkpoint without touching its weights; its training
seeds are read from the history in ``DIR/calibration.json`` (a stage's recorded ``seeds``, or
else the options of its recorded command line: :func:`parse_command`).

Runs in a few minutes on one CPU thread with the defaults.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shlex
import time
import typing
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any
from zipfile import BadZipFile

import numpy as np
import torch
from torch.nn import functional as F

from embodied.apps.training.config_minijudge import (
    ARM,
    BALL,
    DEVELOPMENT_MIN_TNR,
    EXTRA_SOURCES,
    MiniJudgeTrainConfig,
)
from embodied.apps.training.data_minijudge import (
    ARM_COLORS,
    Sample,
    arrival_steps,
    captions_for,
    keypoints_uv,
    make_demonstrations,
    make_samples,
    record_episodes,
)
from embodied.errors import CheckpointError, ConfigError
from embodied.io import (
    atomic_path,
    load_safetensors_file,
    read_json_file,
    remove_stale_temps,
    write_json,
)
from embodied.rewards.calibration import (
    best_threshold,
    calibration_table,
    rates,
    roc_auc,
    tnr_threshold,
)
from embodied.rewards.clips import context_indices
from embodied.rewards.demo2reward.demonstrations import LabelledDemonstration
from embodied.rewards.minijudge.configuration_minijudge import MiniJudgeConfig
from embodied.rewards.minijudge.modeling_minijudge import MiniJudge, resize_frames
from embodied.train_state import optimizer_tensors, restore_optimizer

log = logging.getLogger(__name__)

COMMAND = "embodied train minijudge"
"""The command that runs :func:`train_minijudge`, as recorded in ``calibration.json``."""
_OLD_COMMANDS = ("train_minijudge", "training_minijudge")
"""Ends of the module names earlier stages ran as ``python -m ...`` (e.g.
``embodied.rewards.minijudge.train_minijudge``)."""


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def command_line(config: MiniJudgeTrainConfig) -> str:
    """The ``embodied train minijudge`` command line that runs ``config``: every field that is
    set, so it reads back (:func:`parse_command`) to ``config`` whatever the defaults."""
    words = COMMAND.split()
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if value is not None:
            words += [_flag(f.name), str(value)]
    return shlex.join(words)


def parse_command(command: str) -> MiniJudgeTrainConfig | None:
    """The config a recorded training command line ran with (None: not a minijudge training
    command).

    Reads ``[...]embodied train minijudge --flag value ...`` and the earlier
    ``python -m <module>.train_minijudge ...`` / ``training_minijudge`` forms; each
    ``--flag value`` (or ``--flag=value``) sets the field of that name
    (``--n-arm`` -> ``n_arm``). Options no field has are skipped with their value, as
    earlier stages may have had options this version dropped; unset fields take their default.

    Raises:
        CheckpointError: a minijudge command whose options do not read (a value missing or
            of the wrong type, no ``--out``, or a value the config refuses).
    """
    words = shlex.split(command)
    at = next((i + 1 for i, w in enumerate(words) if w.endswith(_OLD_COMMANDS)), None)
    if at is None:  # the embodied command (also .venv/bin/embodied or python -m embodied)
        found = (i + 3 for i in range(len(words) - 2) if words[i].endswith("embodied"))
        at = next((i for i in found if words[i - 2 : i] == ["train", "minijudge"]), None)
    if at is None:
        return None
    hints = typing.get_type_hints(MiniJudgeTrainConfig)
    fields = {_flag(f.name): f.name for f in dataclasses.fields(MiniJudgeTrainConfig)}
    values: dict[str, Any] = {}
    rest = words[at:]
    try:
        while rest:
            word, *rest = rest
            flag, eq, inline = word.partition("=")
            value = inline if eq else (rest.pop(0) if rest and rest[0][:2] != "--" else None)
            if flag not in fields:
                continue  # an option of an earlier version (or a stray word)
            if value is None:
                raise ValueError(f"{flag} has no value")
            name = fields[flag]
            parse = hints[name] if hints[name] in (int, float) else str
            values[name] = parse(value)
        return MiniJudgeTrainConfig(**values)
    except (ValueError, TypeError) as exc:  # ConfigError is a ValueError
        raise CheckpointError(
            f"training history command {command!r} does not read: {exc}",
            fix="record the stage's 'seeds' in calibration.json, or retrain",
        ) from exc


OTHER, TASK, WRONG_OBJECT = 0, 1, 2


def _kind(text: str, task: str, success: bool) -> int:
    """Caption kind: the task itself, the task naming another object on a success frame
    (e.g. 'reach the blue cube' while the red one is reached), or another caption."""
    if text == task:
        return TASK
    a, b = text.split(), task.split()
    if success and len(a) == len(b) and sum(x != y for x, y in zip(a, b, strict=True)) == 1:
        return WRONG_OBJECT
    return OTHER


POOL_WEIGHTS: dict[tuple[int, bool], float] = {
    (TASK, True): 2.0,
    (TASK, False): 2.0,
    (WRONG_OBJECT, False): 2.0,
    (OTHER, True): 1.0,
    (OTHER, False): 1.0,
}
"""Share of each (caption kind, label) pool in a batch, per env: the task instruction on success
and non-success frames (hard negatives: approach, near misses, blocked), the instruction naming
another object on success frames (binds the object word), and the other captions."""


class PairSet:
    """(clip, caption, label) pairs over resized episode frames, sampled in balanced batches."""

    def __init__(
        self,
        episodes: Sequence[LabelledDemonstration],
        size: int,
        stride: int,
        seed: int,
        arrival_weight: float = 0.0,
        arrival_negative_weight: float | None = None,
    ) -> None:
        rng = np.random.default_rng(seed)
        negative_weight = (
            arrival_weight if arrival_negative_weight is None else arrival_negative_weight
        )
        self.frames = [resize_frames(d.frames, size) for d in episodes]
        self.size = size
        self.keypoints = [keypoints_uv(d, size).astype(np.float32) for d in episodes]
        samples = make_samples(list(episodes), stride, rng)
        # frames at the success boundary: every one of them, whatever the stride
        near = [set(arrival_steps(d, before=2, after=2)) for d in episodes]
        if arrival_weight > 0:
            taken = {(s.episode, s.step) for s in samples}
            for i, d in enumerate(episodes):
                for t in sorted(near[i]):
                    if (i, t) not in taken:
                        samples.append(Sample(i, t, captions_for(d, t, rng)))
        texts: dict[str, int] = {}
        rows = []
        for s in samples:
            task = episodes[s.episode].task
            success = bool(episodes[s.episode].labels[s.step])
            for text, label in s.captions:
                idx = texts.setdefault(text, len(texts))
                rows.append((s.episode, s.step, idx, bool(label), _kind(text, task, success)))
            if task not in {t for t, _ in s.captions}:  # the episode's own task instruction
                idx = texts.setdefault(task, len(texts))
                rows.append((s.episode, s.step, idx, success, TASK))
        self.texts = list(texts)
        arr = np.array(rows, dtype=np.int64)
        self.episode, self.step, self.text = arr[:, 0], arr[:, 1], arr[:, 2]
        self.label, self.kind = arr[:, 3].astype(bool), arr[:, 4]
        self.arrival = (self.kind == TASK) & np.array(
            [t in near[d] for d, t in zip(self.episode, self.step, strict=True)], dtype=bool
        )
        env_of = np.array([d.env_id for d in episodes])[self.episode]
        pools = [
            (np.flatnonzero((env_of == env) & (self.kind == kind) & (self.label == lab)), w)
            for env in sorted(set(env_of.tolist()))
            for (kind, lab), w in POOL_WEIGHTS.items()
        ]
        if arrival_weight > 0:
            pools += [
                (
                    np.flatnonzero((env_of == env) & self.arrival & (self.label == lab)),
                    weight,
                )
                for env in sorted(set(env_of.tolist()))
                for lab, weight in ((True, arrival_weight), (False, negative_weight))
                if weight > 0
            ]
        self.pools = [p for p, _ in pools if len(p)]
        weights = np.array([w for p, w in pools if len(p)])
        self.weights = weights / weights.sum()
        self.n_context = 4

    def clips(self, episode: np.ndarray, step: np.ndarray) -> torch.Tensor:
        """Float clips (B, F, 3, S, S) in [-0.5, 0.5] for (episode, step) pairs."""
        out = [
            self.frames[d][context_indices(int(t), self.n_context)]
            for d, t in zip(episode, step, strict=False)
        ]
        return torch.stack(out).float().div_(255.0).sub_(0.5)

    def keypoint(self, idx: np.ndarray) -> torch.Tensor:
        """Fingertip (ball) pixel (B, 2) of pairs ``idx`` in the resized frames, (u, v) px."""
        uv = [self.keypoints[d][t] for d, t in zip(self.episode[idx], self.step[idx], strict=True)]
        return torch.from_numpy(np.stack(uv))

    def batch(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Pair indices drawn from each pool in proportion to :data:`POOL_WEIGHTS`."""
        counts = np.maximum(1, np.round(self.weights * n).astype(int))
        return np.concatenate([rng.choice(p, c) for p, c in zip(self.pools, counts, strict=True)])


def _cached(folder: str | None, name: str, make: Any) -> list[LabelledDemonstration]:
    """Record episodes with ``make()``, or reload them from ``folder/name.npz`` + ``.json``."""
    if folder is None:
        return list(make())
    frames_path, meta_path = Path(folder) / f"{name}.npz", Path(folder) / f"{name}.json"
    if frames_path.exists() and meta_path.exists():
        try:
            return _load_cached(frames_path, meta_path)
        except (
            OSError,
            ValueError,
            KeyError,
            TypeError,
            AttributeError,
            EOFError,
            BadZipFile,
        ) as exc:
            # a cache is rebuilt from its seeds, so a damaged one costs time, not data
            log.warning("episode cache %s is damaged (%s); recording it again", frames_path, exc)
    episodes = list(make())
    Path(folder).mkdir(parents=True, exist_ok=True)
    arrays = {f"frames_{i}": d.frames for i, d in enumerate(episodes)}
    arrays.update({f"labels_{i}": d.labels for i, d in enumerate(episodes)})
    with atomic_path(frames_path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)
    write_json(
        meta_path,
        [{"task": d.task, "env_id": d.env_id, "infos": d.infos, "meta": d.meta} for d in episodes],
    )
    return episodes


def _load_cached(frames_path: Path, meta_path: Path) -> list[LabelledDemonstration]:
    """Episodes saved by :func:`_cached` (raises on a damaged or inconsistent cache)."""
    meta = json.loads(meta_path.read_text())
    if not isinstance(meta, list):
        raise ValueError(f"{meta_path} holds {type(meta).__name__}, not a list of episodes")
    with np.load(frames_path) as z:
        out = []
        for i, m in enumerate(meta):
            frames, labels = np.asarray(z[f"frames_{i}"]), np.asarray(z[f"labels_{i}"])
            if frames.ndim != 4 or labels.shape != (len(frames),):
                raise ValueError(f"episode {i}: frames {frames.shape}, labels {labels.shape}")
            cubes = {k: np.asarray(v) for k, v in m["meta"].get("cubes", {}).items()}
            out.append(
                LabelledDemonstration(
                    frames,
                    labels,
                    str(m["task"]),
                    str(m["env_id"]),
                    m["infos"],
                    {**m["meta"], "cubes": cubes},
                )
            )
    return out


def _augment(
    x: torch.Tensor, rng: np.random.Generator, uv: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Random +-2 px translation, horizontal flip of half the clips (no caption says left or
    right, so flips keep the labels) and +-10 % brightness, the same over a clip; ``uv``
    (B, 2) pixel keypoints move with the image."""
    b, side = x.shape[0], x.shape[-1]
    dx, dy = rng.integers(-2, 3, 2)
    x = torch.roll(x, shifts=(int(dy), int(dx)), dims=(-2, -1))
    flip = torch.from_numpy(rng.random(b) < 0.5)
    x[flip] = x[flip].flip(-1)
    if uv is not None:
        uv = (uv + torch.tensor([float(dx), float(dy)])) % side  # roll wraps around
        uv[flip, 0] = side - uv[flip, 0]
    gain = torch.from_numpy(rng.uniform(0.9, 1.1, (b, 1, 1, 1, 1)).astype(np.float32))
    return ((x + 0.5) * gain - 0.5).clamp_(-0.5, 0.5), uv


CELL_KINDS = (TASK, WRONG_OBJECT)
"""Caption kinds about what the fingertip (ball) reached: the ones the cell loss supervises."""
FAR_CELLS = 1.5
"""Cells whose centre is farther than this (in cells) from the keypoint must say no."""


def cell_loss(cells: torch.Tensor, uv: torch.Tensor, y: torch.Tensor, size: int) -> torch.Tensor:
    """Cell supervision (:attr:`MiniJudgeTrainConfig.cell_weight`).

    Args:
        cells: (B, N) cell logits (row-major ``side x side`` cells).
        uv: (B, 2) keypoint pixels (u, v) in the ``size`` x ``size`` input.
        y: (B,) labels of the pairs.
        size: Input side (px).

    Returns:
        BCE of the logit interpolated at the keypoint against ``y``, plus the mean BCE of the
        cells farther than :data:`FAR_CELLS` from it against 0.
    """
    b, n = cells.shape
    side = math.isqrt(n)
    grid = (uv / size * 2.0 - 1.0).view(b, 1, 1, 2)
    at = F.grid_sample(cells.view(b, 1, side, side), grid, align_corners=False).view(b)
    centres = (torch.arange(side, dtype=uv.dtype) + 0.5) * (size / side)
    du = (centres[None, None, :] - uv[:, None, None, 0]) / (size / side)
    dv = (centres[None, :, None] - uv[:, None, None, 1]) / (size / side)
    far = (du.square() + dv.square()).flatten(1) > FAR_CELLS**2
    loss_at = F.binary_cross_entropy_with_logits(at, y)
    loss_far = F.binary_cross_entropy_with_logits(cells[far], torch.zeros_like(cells[far]))
    return loss_at + loss_far


def evaluate(
    judge: MiniJudge, episodes: Sequence[LabelledDemonstration], stride: int = 1
) -> dict[str, Any]:
    """Per-frame oracle agreement of ``judge`` with each episode's task instruction."""
    probs, labels, groups, where = [], [], [], []
    for i, d in enumerate(episodes):
        steps = list(range(0, len(d), stride))
        probs.append(judge.score_batch(d.clips(judge.config.n_context, steps), d.task))
        labels.append(d.labels[steps])
        groups += [(d.env_id, d.meta.get("kind", "?"))] * len(steps)
        where += [(i, t) for t in steps]
    p, y, g, w = np.concatenate(probs), np.concatenate(labels), np.array(groups), np.array(where)
    return {
        "probs": p,
        "labels": y,
        "envs": g[:, 0],
        "kinds": g[:, 1],
        "episode": w[:, 0],
        "step": w[:, 1],
    }


def agreement_by_kind(ev: dict[str, Any], threshold: float) -> dict[str, dict[str, Any]]:
    """Oracle agreement per env and episode kind (expert, near, random, ...) of :func:`evaluate`
    results: which false-positive sources the judge falls for."""
    out: dict[str, dict[str, Any]] = {}
    for env_id in sorted(set(ev["envs"].tolist())):
        for kind in sorted(set(ev["kinds"][ev["envs"] == env_id].tolist())):
            m = (ev["envs"] == env_id) & (ev["kinds"] == kind)
            r = rates(ev["probs"][m] >= threshold, ev["labels"][m]).to_dict()
            out.setdefault(env_id, {})[kind] = r
    return out


def colour_binding(judge: MiniJudge, episodes: Sequence[LabelledDemonstration]) -> float | None:
    """Share (percent) of arm_reach success frames on which the instruction naming the reached
    cube scores above the same instruction with each other colour (None: no such frames)."""
    wins: list[np.ndarray] = []
    for d in episodes:
        color = next((c for c in ARM_COLORS if f" {c} " in f" {d.task} "), None)
        if d.env_id != "mujoco:arm_reach" or color is None or not d.labels.any():
            continue
        clips = d.clips(judge.config.n_context, np.flatnonzero(d.labels).tolist())
        right = judge.score_batch(clips, d.task)
        others = [
            judge.score_batch(clips, d.task.replace(color, c)) for c in ARM_COLORS if c != color
        ]
        wins.append(right > np.max(others, axis=0))
    return float(100 * np.concatenate(wins).mean()) if wins else None


def arrival_agreement(
    episodes: Sequence[LabelledDemonstration], ev: dict[str, Any], threshold: float
) -> dict[str, dict[str, float]]:
    """Per env: TPR on the arrival frames (the first success frame and the next, which a
    rollout stopping at success ends on) and TNR on all negative frames, both at
    ``threshold`` in percent, from ``ev`` (:func:`evaluate` of ``episodes`` at stride 1)."""
    arrival = np.zeros(len(ev["probs"]), dtype=bool)
    for i, d in enumerate(episodes):
        steps = [t for t in arrival_steps(d) if d.labels[t]]
        arrival |= (ev["episode"] == i) & np.isin(ev["step"], steps)
    out: dict[str, dict[str, float]] = {}
    for env_id in sorted({d.env_id for d in episodes}):
        arr = (ev["envs"] == env_id) & arrival
        neg = (ev["envs"] == env_id) & ~ev["labels"]
        out[env_id] = {
            "arrival_tpr": float(100 * (ev["probs"][arr] >= threshold).mean())
            if arr.any()
            else float("nan"),
            "n_arrival": int(arr.sum()),
            "tnr": float(100 * (ev["probs"][neg] < threshold).mean())
            if neg.any()
            else float("nan"),
            "n_neg": int(neg.sum()),
        }
    return out


CALIBRATION_SEED0 = 5000
"""First reset seed of the calibration split (plus ``--seed``): the threshold is chosen here."""
REPORT_SEED0 = 6000
"""First reset seed of the report split (plus ``--seed``): agreement is reported only here."""

SeedRanges = dict[str, list[list[int]]]
"""Env id -> inclusive ``[first, last]`` reset-seed ranges, as stored in ``calibration.json``."""


def _add_range(out: SeedRanges, env_id: str, first: int, n: int) -> None:
    if n > 0:
        out.setdefault(env_id, []).append([first, first + n - 1])


def train_seeds(config: MiniJudgeTrainConfig) -> SeedRanges:
    """Reset seeds of the episodes one training run records (none without optimizer steps)."""
    out: SeedRanges = {}
    if config.steps <= 0:
        return out
    _add_range(out, ARM, config.seed, config.n_arm)
    _add_range(out, BALL, config.seed, config.n_ball)
    for field, env_id, _, seed0, _ in EXTRA_SOURCES:
        _add_range(out, env_id, seed0 + config.seed, getattr(config, field))
    return out


def split_seeds(seed0: int, n_val: int, n_wrong: int) -> SeedRanges:
    """Reset seeds of a calibration or report split starting at ``seed0``: ``n_val`` episodes
    per task, then ``n_wrong`` wrong-cube arm_reach episodes on the following seeds."""
    out: SeedRanges = {}
    _add_range(out, ARM, seed0, n_val)
    _add_range(out, ARM, seed0 + n_val, n_wrong)
    _add_range(out, BALL, seed0, n_val)
    return out


def merge_seeds(*parts: SeedRanges) -> SeedRanges:
    """Union of seed ranges, sorted per env (ranges are kept as recorded, not coalesced)."""
    out: SeedRanges = {}
    for part in parts:
        for env_id, ranges in part.items():
            for r in ranges:
                if list(r) not in out.setdefault(env_id, []):
                    out[env_id].append([int(r[0]), int(r[1])])
    return {k: sorted(v) for k, v in sorted(out.items())}


def seed_overlaps(a: SeedRanges, b: SeedRanges) -> list[str]:
    """``'env: [a0, a1] & [b0, b1]'`` for every pair of ranges of ``a`` and ``b`` that share a
    reset seed of the same env (empty: disjoint)."""
    return [
        f"{env_id}: {ra} & {rb}"
        for env_id in sorted(set(a) & set(b))
        for ra in a[env_id]
        for rb in b[env_id]
        if ra[0] <= rb[1] and rb[0] <= ra[1]
    ]


def check_disjoint(splits: dict[str, SeedRanges]) -> None:
    """Refuse splits that share a reset seed (an episode seen in two roles).

    Raises:
        ConfigError: names both splits, the shared ranges and the fix.
    """
    names = list(splits)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            shared = seed_overlaps(splits[a], splits[b])
            if shared:
                raise ConfigError(
                    f"{a} and {b} episodes share reset seeds ({'; '.join(shared)})",
                    fix=f"keep --n-arm/--n-ball/--n-val/--n-wrong-val below "
                    f"{REPORT_SEED0 - CALIBRATION_SEED0} and the extra episode counts below "
                    "1000, or choose another --seed",
                )


def history_train_seeds(train: dict[str, Any]) -> SeedRanges:
    """Reset seeds every stage of a checkpoint's training history was trained on.

    A stage records ``seeds`` (this module since the split of calibration and report) or
    only its ``command``, whose options give the seeds (:func:`parse_command`); ``from`` holds
    the stage it started from.

    Raises:
        CheckpointError: a stage that trained records neither (its seeds are unknown, so
            disjointness cannot be shown), or its command does not read.
    """
    out: SeedRanges = {}
    stage: dict[str, Any] | None = train
    while stage:
        if "seeds" in stage:
            out = merge_seeds(out, stage["seeds"])
        elif int(stage.get("steps", 0)) > 0:
            config = parse_command(str(stage.get("command", "")))
            if config is None:
                raise CheckpointError(
                    f"training history stage {stage.get('command', stage)!r} records neither "
                    f"its seeds nor a train_minijudge command ({COMMAND} ...)",
                    fix="recalibrate a checkpoint trained by this module, or retrain it",
                )
            out = merge_seeds(out, train_seeds(config))
        stage = stage.get("from")
    return out


def _record_split(cache: str | None, name: str, seed0: int, n_val: int, n_wrong: int) -> Any:
    """Episodes of one calibration or report split (see :func:`split_seeds`)."""

    def make() -> list[LabelledDemonstration]:
        episodes = make_demonstrations(n_val, n_val, seed0)
        if n_wrong:
            episodes += record_episodes(ARM, n_wrong, seed0 + n_val, ("wrong",))
        return episodes

    return _cached(cache, f"{name}_{seed0}_{n_val}_{n_wrong}", make)


def _kind_counts(episodes: Sequence[LabelledDemonstration]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for d in episodes:
        kinds = out.setdefault(d.env_id, {})
        kind = str(d.meta.get("kind", "?"))
        kinds[kind] = kinds.get(kind, 0) + 1
    return out


def _per_env(ev: dict[str, Any], threshold: float) -> dict[str, dict[str, float]]:
    """Per env: rates at ``threshold`` and the frames' ROC-AUC (threshold-free)."""
    return {
        env_id: {
            **rates(ev["probs"][m] >= threshold, ev["labels"][m]).to_dict(),
            "roc_auc": roc_auc(ev["probs"][m], ev["labels"][m]),
        }
        for env_id in sorted(set(ev["envs"].tolist()))
        for m in [ev["envs"] == env_id]
    }


def train_minijudge(config: MiniJudgeTrainConfig, resume: bool = False) -> dict[str, Any]:
    """Record data, train, calibrate and save to ``config.out``; returns ``calibration.json``.

    Args:
        config: The run.
        resume: Continue from the last training state in ``config.out`` (written every
            ``config.checkpoint_every`` steps by a run of the same config); the steps after it
            equal an uninterrupted run's (the data is recorded again, or read from ``cache``,
            with the same seeds).

    Raises:
        ConfigError: the training, calibration and report splits would share reset seeds;
            ``config.out`` holds another run's training state (without ``resume``: any).
        CheckpointError: ``config.init`` does not load, or its training history does not
            tell which seeds it was trained on; ``resume`` without a training state, or a
            damaged one.
    """
    out = Path(config.out)
    for folder in (out, Path(config.cache) if config.cache else None):
        if folder is not None:
            remove_stale_temps(folder)  # what a killed run left half-written
    state = _train_state_to_resume(out, config, resume)
    torch.set_num_threads(config.threads)
    # seeded before the judge is built: its initial weights are the first torch draws
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    t0 = time.perf_counter()
    judge, init_train = _initial_judge(config)
    seeds = _split_seeds(config, init_train)
    data = _record_data(config, t0)
    if config.steps > 0:
        _train(judge, data.train, data.calibration, config, rng, t0, state)
    judge.model.eval()
    judge.clear_cache()
    ev = evaluate(judge, data.calibration)
    judge.threshold, rule = _choose_threshold(ev, config)
    judge.calibration = _calibration_record(judge, ev, rule, data, seeds, config, t0)
    if config.init:  # keep the history of how the starting checkpoint was trained
        judge.calibration["train"]["from"] = init_train
    if config.init and config.steps == 0:
        _save_recalibrated(judge, Path(config.init), Path(config.out))
    else:
        judge.save_pretrained(config.out)
    _print_summary(judge, config)
    return judge.calibration


@dataclasses.dataclass(frozen=True)
class _SplitSeeds:
    """The reset seeds of each role an episode can have (env id -> inclusive ranges)."""

    stage: SeedRanges
    """This stage's training seeds (without the starting checkpoint's)."""
    splits: dict[str, SeedRanges]
    """``train`` (this stage's and the history's), ``calibration`` and ``report``."""


@dataclasses.dataclass(frozen=True)
class _Data:
    """The recorded episodes of one run, by split."""

    train: list[LabelledDemonstration]
    calibration: list[LabelledDemonstration]
    report: list[LabelledDemonstration]


def _initial_judge(config: MiniJudgeTrainConfig) -> tuple[MiniJudge, dict[str, Any]]:
    """A new judge, or ``config.init``'s weights; with the history of how those were trained.

    Args:
        config: The run (``init``, ``head``, ``image_size``, ``film_layer``).

    Returns:
        The judge on the CPU and ``config.init``'s training history (``{}``: none).

    Raises:
        CheckpointError: ``config.init``'s calibration or weights do not load into a judge.
    """
    judge_config = MiniJudgeConfig(
        device="cpu", head=config.head, image_size=config.image_size, film_layer=config.film_layer
    )
    init_train: dict[str, Any] = {}  # how the starting checkpoint was trained
    if config.init:  # fine-tune; a FiLM layer new to the checkpoint starts as the identity
        judge_config = MiniJudgeConfig.load(config.init, device="cpu", film_layer=config.film_layer)
    judge = MiniJudge(judge_config)
    if config.init:
        from safetensors.torch import load_file

        calib = Path(config.init) / "calibration.json"
        if calib.exists():
            init_train = read_json_file(
                calib, what="minijudge calibration", fix="start from a checkpoint this module wrote"
            ).get("train", {})
            if not isinstance(init_train, dict):
                raise CheckpointError(
                    f"{calib}: 'train' is {type(init_train).__name__}, not the training history",
                    fix="start from a checkpoint this module wrote",
                )
        weights = load_file(str(Path(config.init) / "model.safetensors"))
        missing, unexpected = judge.model.load_state_dict(weights, strict=False)
        if unexpected or any(not k.startswith("film.") for k in missing):
            raise CheckpointError(
                f"init {config.init!r}: model.safetensors misses {missing}, has unexpected "
                f"{unexpected}",
                fix="start from a minijudge checkpoint (config.json + model.safetensors)",
            )
    return judge, init_train


def _split_seeds(config: MiniJudgeTrainConfig, init_train: dict[str, Any]) -> _SplitSeeds:
    """Every episode's one role: trained on, chooses the threshold, or is reported on.

    Raises:
        ConfigError: two roles would share reset seeds.
        CheckpointError: ``init_train`` does not tell which seeds it was trained on.
    """
    stage_seeds = train_seeds(config)
    seeds = {
        "train": merge_seeds(stage_seeds, history_train_seeds(init_train)),
        "calibration": split_seeds(
            CALIBRATION_SEED0 + config.seed, config.n_val, config.n_wrong_val
        ),
        "report": split_seeds(REPORT_SEED0 + config.seed, config.n_val, config.n_wrong_val),
    }
    check_disjoint(seeds)
    return _SplitSeeds(stage_seeds, seeds)


def _record_data(config: MiniJudgeTrainConfig, t0: float) -> _Data:
    """Record (or read from ``config.cache``) the training, calibration and report episodes.

    Args:
        config: The run.
        t0: The run's start (``time.perf_counter()``, seconds) for the printed duration.
    """
    train: list[LabelledDemonstration] = []
    if config.steps > 0:  # recalibration alone records no training episodes
        train = _cached(
            config.cache,
            "train",
            lambda: make_demonstrations(config.n_arm, config.n_ball, config.seed),
        )
        for field, env_id, name, seed0, kinds in EXTRA_SOURCES:
            n = getattr(config, field)
            if n:
                record = partial(record_episodes, env_id, n, seed0 + config.seed, kinds)
                train += _cached(config.cache, f"{name}_{n}", record)
    calib_episodes = _record_split(
        config.cache,
        "calibration",
        CALIBRATION_SEED0 + config.seed,
        config.n_val,
        config.n_wrong_val,
    )
    report_episodes = _record_split(
        config.cache, "report", REPORT_SEED0 + config.seed, config.n_val, config.n_wrong_val
    )
    t_data = time.perf_counter() - t0
    print(
        f"data: {len(train)} train / {len(calib_episodes)} calibration / {len(report_episodes)} "
        f"report episodes ({t_data:.0f} s)",
        flush=True,
    )
    return _Data(train, calib_episodes, report_episodes)


def _choose_threshold(ev: dict[str, Any], config: MiniJudgeTrainConfig) -> tuple[float, str]:
    """The decision threshold on the calibration split's evaluation ``ev``, and its rule.

    Args:
        ev: :func:`evaluate` on the calibration split.
        config: The run (``threshold_tnr``: None maximises TPR + TNR).

    Returns:
        The threshold (a probability) and the rule that chose it, in words.
    """
    if config.threshold_tnr is None:
        threshold = np.clip(best_threshold(ev["probs"], ev["labels"]), 0.05, 0.95)
        rule = "maximum TPR + TNR over the calibration split's frames, clipped to 0.05..0.95"
    else:  # never clipped down: that would break the TNR it promises
        tnr_t = tnr_threshold(ev["probs"], ev["labels"], ev["envs"], config.threshold_tnr)
        threshold = max(tnr_t, 0.05)
        rule = (
            f"lowest threshold keeping each task's TNR >= {100 * config.threshold_tnr:g} % over "
            "the calibration split's frames, at least 0.05"
        )
    return float(threshold), rule


def _calibration_record(
    judge: MiniJudge,
    ev: dict[str, Any],
    rule: str,
    data: _Data,
    seeds: _SplitSeeds,
    config: MiniJudgeTrainConfig,
    t0: float,
) -> dict[str, Any]:
    """``calibration.json``: the threshold, the report split's agreement and the history.

    Args:
        judge: The trained judge, its ``threshold`` chosen.
        ev: :func:`evaluate` on the calibration split.
        rule: How the threshold was chosen, in words.
        data: The run's episodes (the report split is evaluated here).
        seeds: The splits' reset seeds.
        config: The run.
        t0: The run's start (``time.perf_counter()``, seconds).
    """
    rep = evaluate(judge, data.report)
    per_env = _per_env(rep, judge.threshold)
    return {
        "threshold": judge.threshold,
        "threshold_rule": f"{rule}; every agreement figure below is on the report split unless "
        "named calibration",
        "instruction": "the task instruction (e.g. 'reach the red cube')",
        "splits": {
            "seed_ranges": "env id -> inclusive [first, last] reset seeds; the three splits "
            "share none (checked by train_minijudge)",
            "train": {"seeds": seeds.splits["train"]},
            "calibration": {
                "episodes": len(data.calibration),
                "kinds": _kind_counts(data.calibration),
                "seeds": seeds.splits["calibration"],
            },
            "report": {
                "episodes": len(data.report),
                "kinds": _kind_counts(data.report),
                "seeds": seeds.splits["report"],
            },
        },
        "oracle_agreement": rates(rep["probs"] >= judge.threshold, rep["labels"]).to_dict(),
        "oracle_agreement_per_env": per_env,
        "oracle_agreement_per_kind": agreement_by_kind(rep, judge.threshold),
        "colour_binding_percent": colour_binding(judge, data.report),
        "arrival_agreement_per_env": arrival_agreement(data.report, rep, judge.threshold),
        "calibration_agreement": rates(ev["probs"] >= judge.threshold, ev["labels"]).to_dict(),
        "table": calibration_table(ev["probs"], ev["labels"]),
        "table_split": "calibration",
        "train": {
            "episodes": len(data.train),
            "steps": config.steps,
            "seeds": seeds.stage,
            "seconds": round(time.perf_counter() - t0, 1),
            "command": command_line(config),
            "config": dataclasses.asdict(config),
        },
    }


def _print_summary(judge: MiniJudge, config: MiniJudgeTrainConfig) -> None:
    """Print where the judge was saved and its agreement figures."""
    print(
        f"saved {config.out}: threshold {judge.threshold:.3f} (calibration split), report split "
        f"agreement {judge.calibration['oracle_agreement']}",
        flush=True,
    )
    print(f"  colour binding {judge.calibration['colour_binding_percent']}", flush=True)
    for env_id, r in judge.calibration["arrival_agreement_per_env"].items():
        print(f"  {env_id}: arrival TPR {r['arrival_tpr']:.1f} TNR {r['tnr']:.1f}", flush=True)
    for env_id, kinds in judge.calibration["oracle_agreement_per_kind"].items():
        for kind, r in kinds.items():
            print(f"  {env_id} {kind}: TPR {r['tpr']:.1f} FPR {r['fpr']:.1f}", flush=True)


def _save_recalibrated(judge: MiniJudge, init: Path, out: Path) -> None:
    """Write a recalibrated checkpoint whose weights file is ``init``'s, byte for byte.

    Re-serialising would change the bytes though not the tensors (safetensors orders the
    metadata freely), and a recalibration must leave the weights file as it was.
    """
    out.mkdir(parents=True, exist_ok=True)
    judge.config.threshold = float(judge.threshold)
    judge.config.save(out)
    if out.resolve() != init.resolve():
        weights = (init / "model.safetensors").read_bytes()
        with atomic_path(out / "model.safetensors") as tmp:
            tmp.write_bytes(weights)
    write_json(out / "calibration.json", judge.calibration)


def _train(
    judge: MiniJudge,
    train: list[LabelledDemonstration],
    calib: list[LabelledDemonstration],
    config: MiniJudgeTrainConfig,
    rng: np.random.Generator,
    t0: float,
    state: dict[str, Any] | None = None,
) -> None:
    """Optimise the image tower, text head, scale and bias on ``train`` (progress on the
    calibration split, which only ever chooses the threshold); from ``state`` (a training
    state read by :func:`_train_state_to_resume`) when given."""
    pairs = PairSet(
        train,
        judge.config.image_size,
        config.stride,
        config.seed,
        config.arrival_weight,
        config.arrival_negative_weight,
    )
    text_emb = judge.text.encode(pairs.texts)  # frozen MiniLM, each caption once
    print(f"train: {len(pairs.label)} pairs, {len(pairs.texts)} captions", flush=True)
    model = judge.model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=config.lr, total_steps=config.steps, pct_start=_warmup_fraction(config.steps)
    )
    start = 0
    if state is not None:
        start = _restore_train_state(state, model, opt, sched, rng)
        print(f"resumed at step {start} of {config.steps}", flush=True)
    for step in range(start, config.steps):
        idx = pairs.batch(config.batch, rng)
        x, uv = _augment(pairs.clips(pairs.episode[idx], pairs.step[idx]), rng, pairs.keypoint(idx))
        y = torch.from_numpy(pairs.label[idx].astype(np.float32))
        img, txt = model.embed(x, text_emb[pairs.text[idx]])
        logits = model.logits(img, txt)
        loss = F.binary_cross_entropy_with_logits(logits, y)
        if config.cell_weight > 0:
            m = torch.from_numpy(np.isin(pairs.kind[idx], CELL_KINDS))
            if m.any() and uv is not None:
                cells = model.cell_logits(img[m], txt[m])
                loss = loss + config.cell_weight * cell_loss(cells, uv[m], y[m], pairs.size)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if step % 200 == 0 and step:
            model.eval()
            judge.clear_cache()
            ev = evaluate(judge, calib, stride=4)
            r = rates(ev["probs"] >= 0.5, ev["labels"])
            print(f"  calibration split (p>=0.5): TPR {r.tpr:.1f} TNR {r.tnr:.1f}", flush=True)
            model.train()
        if step % 100 == 0 or step == config.steps - 1:
            acc = ((logits > 0) == (y > 0.5)).float().mean().item()
            print(
                f"step {step:5d} loss {loss.item():.3f} acc {acc:.3f} "
                f"({time.perf_counter() - t0:.0f} s)",
                flush=True,
            )
        done = step + 1
        if done % config.checkpoint_every == 0 or done == config.steps:
            _save_train_state(Path(config.out), config, done, model, opt, sched, rng)


TRAIN_STATE_JSON = "train_state.json"
"""The resumable training state's JSON (step, config, optimizer groups, scheduler, numpy RNG);
its tensors (weights, Adam moments, torch RNG) are in the safetensors file it names."""
TRAIN_STATE_FIX = (
    "the run's resumable state is damaged: train again without --resume into a new --out"
)
RESUME_FREE = ("threads", "cache", "checkpoint_every")
"""Options a resumed run may change. Only ``threads`` changes the numbers (the summation order
of a parallel reduction), in their last bits: with the first run's threads the resumed steps
equal an uninterrupted run's bit for bit."""


def _warmup_fraction(steps: int) -> float:
    """OneCycleLR's warm-up share: 10 %, but two steps where 10 % is exactly one, for which
    OneCycleLR divides by zero (``steps=10``)."""
    return 2.0 / steps if steps * 0.1 == 1.0 else 0.1


def _resume_key(config: MiniJudgeTrainConfig) -> dict[str, Any]:
    return {k: v for k, v in dataclasses.asdict(config).items() if k not in RESUME_FREE}


def _train_state_to_resume(
    out: Path, config: MiniJudgeTrainConfig, resume: bool
) -> dict[str, Any] | None:
    """The training state ``resume`` continues from (None: a new run), checked against
    ``config``; a new run into a folder holding a training state is refused."""
    path = out / TRAIN_STATE_JSON
    if config.steps == 0:  # recalibration (``--init DIR --steps 0``) trains nothing
        return None
    if not resume:
        if path.exists():
            raise ConfigError(
                f"{str(out)!r} holds a judge training run ({path})",
                fix="add --resume to continue it, or pass a new --out to start another run",
            )
        return None
    if not path.exists():
        raise CheckpointError(
            f"nothing to resume: {path} does not exist", fix="drop --resume to start a new run"
        )
    meta = read_json_file(path, what="judge train state", fix=TRAIN_STATE_FIX)
    expected = {"step": int, "tensors": str, "optimizer": dict, "scheduler": dict}
    expected |= {"numpy_rng": dict, "config": dict}
    bad = [k for k, t in expected.items() if not isinstance(meta.get(k), t)]
    if bad:
        raise CheckpointError(
            f"judge train state {str(path)!r} lacks or mistypes {bad}", fix=TRAIN_STATE_FIX
        )
    saved = {k: v for k, v in meta["config"].items() if k not in RESUME_FREE}
    now = json.loads(json.dumps(_resume_key(config)))
    differ = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))
    if differ:
        raise ConfigError(
            f"--resume with options other than the run's in {str(out)!r}: "
            + ", ".join(f"{k} {saved.get(k)!r} -> {now.get(k)!r}" for k in differ),
            fix="rerun with the options of the first run (only --threads, --cache and "
            "--checkpoint-every may change), or pass a new --out",
        )
    if not 0 <= meta["step"] <= config.steps:
        raise CheckpointError(
            f"judge train state {str(path)!r} is at step {meta['step']} of {config.steps}",
            fix=TRAIN_STATE_FIX,
        )
    tensors_path = out / Path(meta["tensors"]).name  # a bare name: never read outside the run
    meta["tensor_values"] = load_safetensors_file(
        tensors_path, what="judge train-state tensors", fix=TRAIN_STATE_FIX
    )
    return meta


def _save_train_state(
    out: Path,
    config: MiniJudgeTrainConfig,
    step: int,
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    sched: torch.optim.lr_scheduler.LRScheduler,
    rng: np.random.Generator,
) -> None:
    """Write one resumable state; the JSON pointer goes last, then older tensors go."""
    from safetensors.torch import save_file

    tensors = {f"model.{k}": v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    opt_tensors, opt_meta = optimizer_tensors(opt)
    tensors |= opt_tensors
    tensors["rng.torch"] = torch.get_rng_state()
    name = f"train_state_{step:07d}.safetensors"
    with atomic_path(out / name) as tmp:
        save_file(tensors, str(tmp))
    write_json(
        out / TRAIN_STATE_JSON,
        {
            "step": step,
            "tensors": name,
            "optimizer": opt_meta,
            "scheduler": sched.state_dict(),
            "numpy_rng": rng.bit_generator.state,
            "config": _resume_key(config),
        },
    )
    for old in out.glob("train_state_*.safetensors"):
        if old.name != name:
            old.unlink(missing_ok=True)


def _restore_train_state(
    state: dict[str, Any],
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    sched: torch.optim.lr_scheduler.LRScheduler,
    rng: np.random.Generator,
) -> int:
    """Load ``state`` into the model, optimizer, scheduler and RNGs; return its step."""
    tensors = state["tensor_values"]
    try:
        model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
        restore_optimizer(opt, tensors, state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        torch.set_rng_state(tensors["rng.torch"])
        rng.bit_generator.state = state["numpy_rng"]
    except (KeyError, RuntimeError, ValueError, TypeError) as exc:
        raise CheckpointError(
            f"judge train state in {state['tensors']!r} does not fit this run ({exc})",
            fix=TRAIN_STATE_FIX,
        ) from exc
    return int(state["step"])


DEVELOPMENT_SEED0 = 70000
"""First reset seed of the development episodes :func:`select_minijudge` compares candidate
checkpoints on: never trained on, never calibrating a threshold, never reported."""
DEVELOPMENT_N_VAL = 48
"""Development episodes per task, recorded like a report split (mixed kinds)."""
DEVELOPMENT_BALL_EXPERTS = 96
"""Extra reach_around expert episodes (their arrival frames are the judge's hardest frames)."""
DEVELOPMENT_BALL_SEED0 = 71000
"""First reset seed of those extra experts: apart from the development split's episodes
(until this change both started at 70000, so the split's expert episodes were counted twice)."""


def development_seeds(
    n_val: int = DEVELOPMENT_N_VAL, n_ball: int = DEVELOPMENT_BALL_EXPERTS
) -> SeedRanges:
    """Reset seeds of :func:`select_minijudge`'s development episodes (the report-like split
    and the extra reach_around experts, checked disjoint: no episode counts twice).

    Raises:
        ConfigError: the split reaches the extra experts' seeds (``n_val`` too large).
    """
    split = split_seeds(DEVELOPMENT_SEED0, n_val, 0)
    experts: SeedRanges = {}
    _add_range(experts, BALL, DEVELOPMENT_BALL_SEED0, n_ball)
    check_disjoint({"development split": split, "development experts": experts})
    return merge_seeds(split, experts)


def checkpoint_seeds(checkpoint: Path) -> dict[str, SeedRanges]:
    """Reset seeds a checkpoint's ``calibration.json`` says it was trained, calibrated and
    reported on (training: every stage of its history)."""
    path = Path(checkpoint) / "calibration.json"
    retrain = "recalibrate or retrain the checkpoint with `embodied train minijudge`"
    calib = read_json_file(path, what="minijudge calibration", fix=retrain)
    try:
        seeds = {
            "train": history_train_seeds(calib["train"]),
            "calibration": merge_seeds(calib["splits"]["calibration"]["seeds"]),
            "report": merge_seeds(calib["splits"]["report"]["seeds"]),
        }
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        if isinstance(exc, CheckpointError):
            raise
        raise CheckpointError(
            f"{path} does not record its seeds (train history, splits.calibration.seeds, "
            f"splits.report.seeds as env -> [[first, last], ...]): {type(exc).__name__}: {exc}",
            fix=retrain,
        ) from exc
    return seeds


def select_minijudge(
    checkpoints: Sequence[Path],
    cache: str | None = None,
    n_val: int = DEVELOPMENT_N_VAL,
    n_ball: int = DEVELOPMENT_BALL_EXPERTS,
    min_tnr: float = DEVELOPMENT_MIN_TNR,
) -> dict[str, Any]:
    """Compare candidate checkpoints on development episodes and choose one.

    Each candidate is judged at its own calibrated threshold on arrival frames (the first
    success frame and the next: where a rollout stopping at success ends) of a report-like
    development split and of ``n_ball`` more reach_around experts. The choice is the fewest
    arrival-frame misses over both sets among candidates whose TNR on every task's frames is
    at least ``min_tnr`` percent (all candidates when none is); ties go to the higher
    worst-task TNR. The report split is never looked at, so its figures stay an unbiased
    estimate for the chosen one.

    Raises:
        ConfigError: a candidate's ``calibration.json`` names a development seed among its
            training, calibration or report seeds, or ``min_tnr`` is outside 0..100.
    """
    if not 0.0 <= min_tnr <= 100.0:
        raise ConfigError(
            f"min_tnr {min_tnr!r} must be a percentage in 0..100", fix="e.g. min_tnr=98"
        )
    if not checkpoints:
        raise ConfigError("checkpoints: none given", fix="pass one or more checkpoint folders")
    dev = development_seeds(n_val, n_ball)
    for ck in checkpoints:
        for role, seeds in checkpoint_seeds(ck).items():
            shared = seed_overlaps(dev, seeds)
            if shared:
                raise ConfigError(
                    f"checkpoint {str(ck)!r}: its {role} seeds include development seeds "
                    f"({'; '.join(shared)})",
                    fix="development episodes must be unseen: retrain without those seeds",
                )
    s0 = DEVELOPMENT_SEED0
    sets = {
        "development": _cached(
            cache, f"dev_split_{s0}_{n_val}", lambda: make_demonstrations(n_val, n_val, s0)
        ),
        "ball_experts": _cached(
            cache,
            f"dev_ball_{DEVELOPMENT_BALL_SEED0}_{n_ball}",
            lambda: record_episodes(BALL, n_ball, DEVELOPMENT_BALL_SEED0, ("expert",)),
        ),
    }
    rows = []
    for ck in checkpoints:
        judge = MiniJudge.from_pretrained(ck, device="cpu")
        row: dict[str, Any] = {"checkpoint": str(ck), "threshold": judge.threshold}
        misses, tnr = 0, 100.0
        for name, episodes in sets.items():
            for env_id, r in arrival_agreement(
                episodes, evaluate(judge, episodes), judge.threshold
            ).items():
                missed = round(r["n_arrival"] * (100 - r["arrival_tpr"]) / 100)
                row[f"{name} {env_id}"] = {**r, "arrival_missed": missed}
                misses += missed
                if r["n_neg"]:
                    tnr = min(tnr, r["tnr"])
        row["arrival_missed"], row["worst_tnr"] = misses, tnr
        rows.append(row)
    eligible = [r for r in rows if r["worst_tnr"] >= min_tnr] or rows
    best = min(eligible, key=lambda r: (r["arrival_missed"], -r["worst_tnr"]))
    return {
        "development_seeds": dev,
        "min_tnr": min_tnr,
        "candidates": rows,
        "chosen": best["checkpoint"],
    }
