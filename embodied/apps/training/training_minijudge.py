"""Train the shipped judge: ``python -m embodied.apps.training.training_minijudge --out DIR``.

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
seeds are read from the history in ``DIR/calibration.json``.

Runs in a few minutes on one CPU thread with the defaults.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from embodied.apps.training.data_minijudge import (
    ARM_COLORS,
    make_demos,
    make_samples,
    record_episodes,
)
from embodied.errors import CheckpointError, ConfigError
from embodied.io import atomic_path, write_json
from embodied.rewards.calibration import best_threshold, calibration_table, rates
from embodied.rewards.clips import context_indices
from embodied.rewards.demo2reward.demonstrations import LabelledDemo
from embodied.rewards.minijudge.configuration_minijudge import MiniJudgeConfig
from embodied.rewards.minijudge.modeling_minijudge import MiniJudge, resize_frames

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
    """(clip, caption, label) pairs over resized demo frames, sampled in balanced batches."""

    def __init__(self, demos: Sequence[LabelledDemo], size: int, stride: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.frames = [resize_frames(d.frames, size) for d in demos]
        samples = make_samples(list(demos), stride, rng)
        texts: dict[str, int] = {}
        rows = []
        for s in samples:
            task = demos[s.demo].task
            success = bool(demos[s.demo].labels[s.step])
            for text, label in s.captions:
                idx = texts.setdefault(text, len(texts))
                rows.append((s.demo, s.step, idx, bool(label), _kind(text, task, success)))
            if task not in {t for t, _ in s.captions}:  # the episode's own task instruction
                idx = texts.setdefault(task, len(texts))
                rows.append((s.demo, s.step, idx, success, TASK))
        self.texts = list(texts)
        arr = np.array(rows, dtype=np.int64)
        self.demo, self.step, self.text = arr[:, 0], arr[:, 1], arr[:, 2]
        self.label, self.kind = arr[:, 3].astype(bool), arr[:, 4]
        env_of = np.array([d.env_id for d in demos])[self.demo]
        pools = [
            (np.flatnonzero((env_of == env) & (self.kind == kind) & (self.label == lab)), w)
            for env in sorted(set(env_of.tolist()))
            for (kind, lab), w in POOL_WEIGHTS.items()
        ]
        self.pools = [p for p, _ in pools if len(p)]
        weights = np.array([w for p, w in pools if len(p)])
        self.weights = weights / weights.sum()
        self.n_context = 4

    def clips(self, demo: np.ndarray, step: np.ndarray) -> torch.Tensor:
        """Float clips (B, F, 3, S, S) in [-0.5, 0.5] for (demo, step) pairs."""
        out = [
            self.frames[d][context_indices(int(t), self.n_context)]
            for d, t in zip(demo, step, strict=False)
        ]
        return torch.stack(out).float().div_(255.0).sub_(0.5)

    def batch(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Pair indices drawn from each pool in proportion to :data:`POOL_WEIGHTS`."""
        counts = np.maximum(1, np.round(self.weights * n).astype(int))
        return np.concatenate([rng.choice(p, c) for p, c in zip(self.pools, counts, strict=True)])


def _cached(folder: str | None, name: str, make: Any) -> list[LabelledDemo]:
    """Record demos with ``make()``, or reload them from ``folder/name.npz`` + ``.json``."""
    if folder is None:
        return list(make())
    frames_path, meta_path = Path(folder) / f"{name}.npz", Path(folder) / f"{name}.json"
    if frames_path.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        with np.load(frames_path) as z:
            return [
                LabelledDemo(
                    z[f"frames_{i}"],
                    z[f"labels_{i}"],
                    m["task"],
                    m["env_id"],
                    m["infos"],
                    {
                        **m["meta"],
                        "cubes": {k: np.asarray(v) for k, v in m["meta"].get("cubes", {}).items()},
                    },
                )
                for i, m in enumerate(meta)
            ]
    demos = list(make())
    Path(folder).mkdir(parents=True, exist_ok=True)
    arrays = {f"frames_{i}": d.frames for i, d in enumerate(demos)}
    arrays.update({f"labels_{i}": d.labels for i, d in enumerate(demos)})
    with atomic_path(frames_path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)
    write_json(
        meta_path,
        [{"task": d.task, "env_id": d.env_id, "infos": d.infos, "meta": d.meta} for d in demos],
    )
    return demos


def _augment(x: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
    """Random +-2 px translation, horizontal flip of half the clips (no caption says left or
    right, so flips keep the labels) and +-10 % brightness, the same over a clip."""
    b = x.shape[0]
    dx, dy = rng.integers(-2, 3, 2)
    x = torch.roll(x, shifts=(int(dy), int(dx)), dims=(-2, -1))
    flip = torch.from_numpy(rng.random(b) < 0.5)
    x[flip] = x[flip].flip(-1)
    gain = torch.from_numpy(rng.uniform(0.9, 1.1, (b, 1, 1, 1, 1)).astype(np.float32))
    return ((x + 0.5) * gain - 0.5).clamp_(-0.5, 0.5)


def evaluate(judge: MiniJudge, demos: Sequence[LabelledDemo], stride: int = 1) -> dict[str, Any]:
    """Per-frame oracle agreement of ``judge`` with each demo's task instruction."""
    probs, labels, groups = [], [], []
    for d in demos:
        steps = list(range(0, len(d), stride))
        probs.append(judge.score_batch(d.clips(judge.config.n_context, steps), d.task))
        labels.append(d.labels[steps])
        groups += [(d.env_id, d.meta.get("kind", "?"))] * len(steps)
    p, y, g = np.concatenate(probs), np.concatenate(labels), np.array(groups)
    return {"probs": p, "labels": y, "envs": g[:, 0], "kinds": g[:, 1]}


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


def colour_binding(judge: MiniJudge, demos: Sequence[LabelledDemo]) -> float | None:
    """Share (percent) of arm_reach success frames on which the instruction naming the reached
    cube scores above the same instruction with each other colour (None: no such frames)."""
    wins: list[np.ndarray] = []
    for d in demos:
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


ARM, BALL = "mujoco:arm_reach", "mujoco:reach_around"
CALIBRATION_SEED0 = 5000
"""First reset seed of the calibration split (plus ``--seed``): the threshold is chosen here."""
REPORT_SEED0 = 6000
"""First reset seed of the report split (plus ``--seed``): agreement is reported only here."""
EXTRA_ARM_SOURCES = (  # (--option dest, cache name, first reset seed, kinds) of extra arm data
    ("extra_arm_experts", "extra_arm", 9000, ("expert",)),
    ("wrong_arm", "wrong", 11000, ("wrong",)),
    ("swap_arm", "swap_arm", 12000, ("swap",)),
)

SeedRanges = dict[str, list[list[int]]]
"""Env id -> inclusive ``[first, last]`` reset-seed ranges, as stored in ``calibration.json``."""


def _add_range(out: SeedRanges, env_id: str, first: int, n: int) -> None:
    if n > 0:
        out.setdefault(env_id, []).append([first, first + n - 1])


def train_seeds(args: argparse.Namespace) -> SeedRanges:
    """Reset seeds of the episodes one training run records (none without optimizer steps)."""
    out: SeedRanges = {}
    if args.steps <= 0:
        return out
    _add_range(out, ARM, args.seed, args.n_arm)
    _add_range(out, BALL, args.seed, args.n_ball)
    for dest, _, seed0, _ in EXTRA_ARM_SOURCES:
        _add_range(out, ARM, seed0 + args.seed, getattr(args, dest))
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


def history_train_seeds(train: dict[str, Any], parser: argparse.ArgumentParser) -> SeedRanges:
    """Reset seeds every stage of a checkpoint's training history was trained on.

    A stage records ``seeds`` (this script since the split of calibration and report) or
    only its ``command``, whose options are parsed with this script's parser; ``from`` holds
    the stage it started from.

    Raises:
        CheckpointError: a stage that trained records neither (its seeds are unknown, so
            disjointness cannot be shown).
    """
    out: SeedRanges = {}
    stage: dict[str, Any] | None = train
    while stage:
        if "seeds" in stage:
            out = merge_seeds(out, stage["seeds"])
        elif int(stage.get("steps", 0)) > 0:
            words = shlex.split(str(stage.get("command", "")))
            at = next((i for i, w in enumerate(words) if w.endswith("train_minijudge")), None)
            if at is None:
                raise CheckpointError(
                    f"training history stage {stage.get('command', stage)!r} records neither "
                    "its seeds nor a train_minijudge command",
                    fix="recalibrate a checkpoint trained by this script, or retrain it",
                )
            try:
                known, _ = parser.parse_known_args(words[at + 1 :])
            except SystemExit as exc:  # argparse exits on a command it cannot read
                raise CheckpointError(
                    f"training history command {stage['command']!r} does not parse",
                    fix="record the stage's 'seeds' in calibration.json, or retrain",
                ) from exc
            out = merge_seeds(out, train_seeds(known))
        stage = stage.get("from")
    return out


def _record_split(cache: str | None, name: str, seed0: int, n_val: int, n_wrong: int) -> Any:
    """Episodes of one calibration or report split (see :func:`split_seeds`)."""

    def make() -> list[LabelledDemo]:
        demos = make_demos(n_val, n_val, seed0)
        if n_wrong:
            demos += record_episodes(ARM, n_wrong, seed0 + n_val, ("wrong",))
        return demos

    return _cached(cache, f"{name}_{seed0}_{n_val}_{n_wrong}", make)


def _kind_counts(demos: Sequence[LabelledDemo]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for d in demos:
        kinds = out.setdefault(d.env_id, {})
        kind = str(d.meta.get("kind", "?"))
        kinds[kind] = kinds.get(kind, 0) + 1
    return out


def _per_env(ev: dict[str, Any], threshold: float) -> dict[str, dict[str, float]]:
    return {
        env_id: rates(ev["probs"][m] >= threshold, ev["labels"][m]).to_dict()
        for env_id in sorted(set(ev["envs"].tolist()))
        for m in [ev["envs"] == env_id]
    }


def build_parser() -> argparse.ArgumentParser:
    """The command line of this script (also parses the commands in a checkpoint's
    training history)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="checkpoint folder to write")
    ap.add_argument("--n-arm", type=int, default=48, help="arm_reach training episodes")
    ap.add_argument("--n-ball", type=int, default=32, help="reach_around training episodes")
    ap.add_argument(
        "--n-val",
        type=int,
        default=24,
        help="episodes per task in each of the calibration and report splits",
    )
    ap.add_argument(
        "--n-wrong-val",
        type=int,
        default=12,
        help="wrong-cube arm_reach episodes in each of the calibration and report splits",
    )
    ap.add_argument("--steps", type=int, default=1500, help="optimizer steps")
    ap.add_argument("--batch", type=int, default=128, help="pairs per step")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--stride", type=int, default=2, help="frames between training clips")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--extra-arm-experts",
        type=int,
        default=32,
        help="additional arm_reach expert episodes (positives are rare)",
    )
    ap.add_argument(
        "--wrong-arm",
        type=int,
        default=0,
        help="arm_reach episodes where the expert reaches another cube than the instruction names",
    )
    ap.add_argument(
        "--swap-arm",
        type=int,
        default=0,
        help="arm_reach expert episodes in groups of 4 over one layout with the cube colours "
        "rotated (teaches which colour is under the gripper)",
    )
    ap.add_argument("--init", default=None, help="checkpoint folder to start from (fine-tune)")
    ap.add_argument("--image-size", type=int, default=128, help="judge input side (px)")
    ap.add_argument("--head", default="cells", help="image head: cells or flatten")
    ap.add_argument("--film-layer", type=int, default=-1, help="FiLM conv index (-1: off)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads for training")
    ap.add_argument("--cache", default=None, help="folder to cache recorded episodes (npz)")
    return ap


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Record data, train, calibrate and save; returns the metrics."""
    ap = build_parser()
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()

    config = MiniJudgeConfig(
        device="cpu", head=args.head, image_size=args.image_size, film_layer=args.film_layer
    )
    init_train: dict[str, Any] = {}  # how the starting checkpoint was trained
    if args.init:  # fine-tune; a FiLM layer new to the checkpoint starts as the identity
        config = MiniJudgeConfig.load(args.init, device="cpu", film_layer=args.film_layer)
    judge = MiniJudge(config)
    if args.init:
        from safetensors.torch import load_file

        calib = Path(args.init) / "calibration.json"
        if calib.exists():
            init_train = json.loads(calib.read_text()).get("train", {})
        state = load_file(str(Path(args.init) / "model.safetensors"))
        missing, unexpected = judge.model.load_state_dict(state, strict=False)
        if unexpected or any(not k.startswith("film.") for k in missing):
            raise SystemExit(f"--init {args.init}: missing {missing}, unexpected {unexpected}")
    # every episode has one role: trained on, chooses the threshold, or is reported on
    stage_seeds = train_seeds(args)
    seeds = {
        "train": merge_seeds(stage_seeds, history_train_seeds(init_train, ap)),
        "calibration": split_seeds(CALIBRATION_SEED0 + args.seed, args.n_val, args.n_wrong_val),
        "report": split_seeds(REPORT_SEED0 + args.seed, args.n_val, args.n_wrong_val),
    }
    check_disjoint(seeds)
    train: list[LabelledDemo] = []
    if args.steps > 0:  # recalibration alone records no training episodes
        train = _cached(args.cache, "train", lambda: make_demos(args.n_arm, args.n_ball, args.seed))
        for dest, name, seed0, kinds in EXTRA_ARM_SOURCES:
            n = getattr(args, dest)
            if n:
                record = partial(record_episodes, ARM, n, seed0 + args.seed, kinds)
                train += _cached(args.cache, f"{name}_{n}", record)
    calib_demos = _record_split(
        args.cache, "calibration", CALIBRATION_SEED0 + args.seed, args.n_val, args.n_wrong_val
    )
    report_demos = _record_split(
        args.cache, "report", REPORT_SEED0 + args.seed, args.n_val, args.n_wrong_val
    )
    t_data = time.perf_counter() - t0
    print(
        f"data: {len(train)} train / {len(calib_demos)} calibration / {len(report_demos)} "
        f"report episodes ({t_data:.0f} s)",
        flush=True,
    )

    if args.steps > 0:
        _train(judge, train, calib_demos, args, rng, t0)
    judge.model.eval()
    judge.clear_cache()

    ev = evaluate(judge, calib_demos)
    judge.threshold = float(np.clip(best_threshold(ev["probs"], ev["labels"]), 0.05, 0.95))
    rep = evaluate(judge, report_demos)
    per_env = _per_env(rep, judge.threshold)
    judge.calibration = {
        "threshold": judge.threshold,
        "threshold_rule": "maximum TPR + TNR over the calibration split's frames, clipped to "
        "0.05..0.95; every agreement figure below is on the report split unless named "
        "calibration",
        "instruction": "the task instruction (e.g. 'reach the red cube')",
        "splits": {
            "seed_ranges": "env id -> inclusive [first, last] reset seeds; the three splits "
            "share none (checked by train_minijudge)",
            "train": {"seeds": seeds["train"]},
            "calibration": {
                "episodes": len(calib_demos),
                "kinds": _kind_counts(calib_demos),
                "seeds": seeds["calibration"],
            },
            "report": {
                "episodes": len(report_demos),
                "kinds": _kind_counts(report_demos),
                "seeds": seeds["report"],
            },
        },
        "oracle_agreement": rates(rep["probs"] >= judge.threshold, rep["labels"]).to_dict(),
        "oracle_agreement_per_env": per_env,
        "oracle_agreement_per_kind": agreement_by_kind(rep, judge.threshold),
        "colour_binding_percent": colour_binding(judge, report_demos),
        "calibration_agreement": rates(ev["probs"] >= judge.threshold, ev["labels"]).to_dict(),
        "table": calibration_table(ev["probs"], ev["labels"]),
        "table_split": "calibration",
        "train": {
            "episodes": len(train),
            "steps": args.steps,
            "seeds": stage_seeds,
            "seconds": round(time.perf_counter() - t0, 1),
            "command": "python -m embodied.apps.training.training_minijudge "
            + shlex.join(argv if argv is not None else sys.argv[1:]),
        },
    }
    if args.init:  # keep the history of how the starting checkpoint was trained
        judge.calibration["train"]["from"] = init_train
    if args.init and args.steps == 0:
        _save_recalibrated(judge, Path(args.init), Path(args.out))
    else:
        judge.save_pretrained(args.out)
    print(
        f"saved {args.out}: threshold {judge.threshold:.3f} (calibration split), report split "
        f"agreement {judge.calibration['oracle_agreement']}",
        flush=True,
    )
    for env_id, kinds in judge.calibration["oracle_agreement_per_kind"].items():
        for kind, r in kinds.items():
            print(f"  {env_id} {kind}: TPR {r['tpr']:.1f} FPR {r['fpr']:.1f}", flush=True)
    return judge.calibration


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
    train: list[LabelledDemo],
    calib: list[LabelledDemo],
    args: argparse.Namespace,
    rng: np.random.Generator,
    t0: float,
) -> None:
    """Optimise the image tower, text head, scale and bias on ``train`` (progress on the
    calibration split, which only ever chooses the threshold)."""
    pairs = PairSet(train, judge.config.image_size, args.stride, args.seed)
    text_emb = judge.text.encode(pairs.texts)  # frozen MiniLM, each caption once
    print(f"train: {len(pairs.label)} pairs, {len(pairs.texts)} captions", flush=True)
    model = judge.model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=args.lr, total_steps=args.steps, pct_start=0.1
    )
    for step in range(args.steps):
        idx = pairs.batch(args.batch, rng)
        x = _augment(pairs.clips(pairs.demo[idx], pairs.step[idx]), rng)
        y = torch.from_numpy(pairs.label[idx].astype(np.float32))
        logits = model(x, text_emb[pairs.text[idx]])
        loss = F.binary_cross_entropy_with_logits(logits, y)
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
        if step % 100 == 0 or step == args.steps - 1:
            acc = ((logits > 0) == (y > 0.5)).float().mean().item()
            print(
                f"step {step:5d} loss {loss.item():.3f} acc {acc:.3f} "
                f"({time.perf_counter() - t0:.0f} s)",
                flush=True,
            )


if __name__ == "__main__":
    from embodied.errors import EmbodiedError

    try:
        main()
    except EmbodiedError as exc:  # as the embodied CLI: one clean line, exit code 2
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
