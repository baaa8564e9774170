"""Train the shipped judge: ``python -m embodied.rewards.minijudge.train_minijudge --out DIR``.

1. Record MuJoCo episodes (expert, near-miss, blocked, random) and caption every frame from
   sim state (:mod:`~embodied.rewards.minijudge.data_minijudge`).
2. Embed each distinct caption once with the frozen MiniLM text tower (cached).
3. Train the CNN image tower, text projection head, scale and bias with a sigmoid (SigLIP-
   style) loss on (clip, caption, is-true) pairs, balanced between true and false captions.
4. Calibrate the decision threshold on held-out episodes with the task instructions and
   save ``config.json``, ``model.safetensors`` and ``calibration.json``.

Runs in a few minutes on one CPU thread with the defaults.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from embodied.io import atomic_path, write_json
from embodied.rewards.calibration import best_threshold, calibration_table, rates
from embodied.rewards.clips import context_indices
from embodied.rewards.demo2reward.demos import LabelledDemo
from embodied.rewards.minijudge.configuration_minijudge import MiniJudgeConfig
from embodied.rewards.minijudge.data_minijudge import make_demos, make_samples, record_episodes
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
    from embodied.rewards.minijudge.data_minijudge import ARM_COLORS

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


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Record data, train, calibrate and save; returns the metrics."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="checkpoint folder to write")
    ap.add_argument("--n-arm", type=int, default=48, help="arm_reach training episodes")
    ap.add_argument("--n-ball", type=int, default=32, help="reach_around training episodes")
    ap.add_argument("--n-val", type=int, default=16, help="held-out episodes per task")
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
    train = _cached(args.cache, "train", lambda: make_demos(args.n_arm, args.n_ball, args.seed))
    more = (  # extra arm_reach episodes: (count, cache name, first seed, kinds)
        (args.extra_arm_experts, "extra_arm", 9000, ("expert",)),
        (args.wrong_arm, "wrong", 11000, ("wrong",)),
        (args.swap_arm, "swap_arm", 12000, ("swap",)),
    )
    for n, name, seed0, kinds in more:
        if n:
            record = partial(record_episodes, "mujoco:arm_reach", n, seed0 + args.seed, kinds)
            train += _cached(args.cache, f"{name}_{n}", record)
    val = _cached(args.cache, "val", lambda: make_demos(args.n_val, args.n_val, 5000 + args.seed))
    t_data = time.perf_counter() - t0
    pairs = PairSet(train, config.image_size, args.stride, args.seed)
    text_emb = judge.text.encode(pairs.texts)  # frozen MiniLM, each caption once
    print(
        f"data: {len(train)} train / {len(val)} val episodes, {len(pairs.label)} pairs, "
        f"{len(pairs.texts)} captions ({t_data:.0f} s)",
        flush=True,
    )

    model = judge.model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(  # --steps 0 with --init: recalibrate only
        opt, max_lr=args.lr, total_steps=max(1, args.steps), pct_start=0.1
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
            ev = evaluate(judge, val, stride=4)
            r = rates(ev["probs"] >= 0.5, ev["labels"])
            print(f"  val (task instruction, p>=0.5): TPR {r.tpr:.1f} TNR {r.tnr:.1f}", flush=True)
            model.train()
        if step % 100 == 0 or step == args.steps - 1:
            acc = ((logits > 0) == (y > 0.5)).float().mean().item()
            print(
                f"step {step:5d} loss {loss.item():.3f} acc {acc:.3f} "
                f"({time.perf_counter() - t0:.0f} s)",
                flush=True,
            )
    model.eval()
    judge.clear_cache()

    ev = evaluate(judge, val)
    judge.threshold = float(np.clip(best_threshold(ev["probs"], ev["labels"]), 0.05, 0.95))
    per_env = {}
    for env_id in sorted(set(ev["envs"].tolist())):
        m = ev["envs"] == env_id
        per_env[env_id] = rates(ev["probs"][m] >= judge.threshold, ev["labels"][m]).to_dict()
    judge.calibration = {
        "threshold": judge.threshold,
        "instruction": "the task instruction (e.g. 'reach the red cube')",
        "held_out_episodes": len(val),
        "held_out_seeds": f"{5000 + args.seed}..{5000 + args.seed + args.n_val - 1}",
        "oracle_agreement": rates(ev["probs"] >= judge.threshold, ev["labels"]).to_dict(),
        "oracle_agreement_per_env": per_env,
        "oracle_agreement_per_kind": agreement_by_kind(ev, judge.threshold),
        "colour_binding_percent": colour_binding(judge, val),
        "table": calibration_table(ev["probs"], ev["labels"]),
        "train": {
            "episodes": len(train),
            "pairs": len(pairs.label),
            "steps": args.steps,
            "seconds": round(time.perf_counter() - t0, 1),
            "command": "python -m embodied.rewards.minijudge.train_minijudge "
            + " ".join(argv if argv is not None else sys.argv[1:]),
        },
    }
    if args.init:  # keep the history of how the starting checkpoint was trained
        judge.calibration["train"]["from"] = init_train
    judge.save_pretrained(args.out)
    print(
        f"saved {args.out}: threshold {judge.threshold:.3f}, agreement "
        f"{judge.calibration['oracle_agreement']}",
        flush=True,
    )
    for env_id, env_rates in per_env.items():
        print(f"  {env_id}: {env_rates}")
    return judge.calibration


if __name__ == "__main__":
    main()
