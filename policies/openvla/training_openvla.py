"""Behaviour cloning of OpenVLA models: image + instruction -> action tokens.

The loss is OpenVLA's: next-token cross-entropy on the action tokens only (prompt and image
positions are ignored). Actions are normalised to [-1, 1] with the dataset's q01/q99
(masked dims, e.g. the gripper, pass through) and binned onto the last 256 vocabulary ids.
:func:`build_tiny_vla` creates a CPU-sized model of the same classes with a tokenizer built
from the training instructions.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.utils import parametrize

from embodied.distributed import Distributed
from embodied.errors import ConfigError
from policies.openvla.configuration_openvla import BC_SAMPLING, BCSettings, OpenVLAConfig
from policies.openvla.modeling_openvla import IGNORE_INDEX, OpenVLAModel
from policies.openvla.processor_openvla import (
    OpenVLAProcessor,
    action_stats,
    build_tiny_tokenizer,
    compute_norm_stats,
    normalize,
    tokenizer_words,
)


@dataclass
class DemonstrationSteps:
    """Flat demonstration steps.

    Attributes:
        images: uint8 (N, H, W, 3) camera frames.
        instructions: N instructions (as the model will see them).
        actions: (N, action_dim) actions in env units.
        episode: (N,) episode index of each step.
        concept: (N,) concept value per step (e.g. commanded speed, m/s) for contrast sets.
        meta: Free-form description (env id, speeds).
    """

    images: np.ndarray
    instructions: list[str]
    actions: np.ndarray
    episode: np.ndarray
    concept: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.images)
        lens = {len(self.instructions), len(self.actions), len(self.episode), len(self.concept)}
        if lens != {n} or n == 0:
            raise ConfigError(
                f"demonstration arrays must share a non-zero length, got {n} and {sorted(lens)}"
            )

    def __len__(self) -> int:
        return len(self.images)

    def subset(self, idx: np.ndarray) -> DemonstrationSteps:
        """The steps at ``idx``."""
        return DemonstrationSteps(
            self.images[idx],
            [self.instructions[i] for i in idx],
            self.actions[idx],
            self.episode[idx],
            self.concept[idx],
            dict(self.meta),
        )


def build_tiny_vla(
    instructions: Sequence[str],
    actions: np.ndarray,
    unnorm_key: str,
    mask: Sequence[bool] | None = None,
    seed: int = 0,
    action_bounds: str = "q99",
    extra_words: Sequence[str] = (),
    **config_overrides: Any,
) -> tuple[OpenVLAModel, OpenVLAProcessor]:
    """A tiny random-init OpenVLA whose tokenizer knows the instruction words.

    Args:
        instructions: Training instructions (their words get token ids).
        actions: (N, D) training actions for the q01/q99 statistics.
        unnorm_key: Name of the dataset statistics entry.
        mask: Which action dims are normalised (False = passed through, e.g. the gripper).
        seed: Initialisation seed.
        action_bounds: How actions map onto the bins (:func:`compute_norm_stats`' ``bounds``).
        extra_words: Words the tokenizer knows even if no instruction has them (e.g. every
            number of a scale that :attr:`BCSettings.ordinal_words` ties, when few
            demonstrations name only some of them).
        **config_overrides: Passed to :meth:`OpenVLAConfig.tiny`.
    """
    words = tokenizer_words(instructions)
    tokenizer = build_tiny_tokenizer([*words, *(w for w in extra_words if w not in words)])
    stats = {unnorm_key: compute_norm_stats(actions, mask, action_bounds)}
    cfg = OpenVLAConfig.tiny(
        vocab_size=len(tokenizer) - 1 + 64, norm_stats=stats, **config_overrides
    )
    torch.manual_seed(seed)
    return OpenVLAModel(cfg), OpenVLAProcessor(cfg, tokenizer)


def make_batch(
    processor: OpenVLAProcessor,
    demonstrations: DemonstrationSteps,
    idx: np.ndarray,
    unnorm_key: str | None = None,
) -> dict[str, torch.Tensor]:
    """Teacher-forcing batch: prompt + action tokens, labels on the action tokens only."""
    stats = action_stats(processor.config, unnorm_key)
    tokens = processor.actions.encode(normalize(demonstrations.actions[idx], stats))
    ids, mask = processor.encode_prompts(
        [demonstrations.instructions[i] for i in idx], tokens.tolist()
    )
    labels = torch.full_like(ids, IGNORE_INDEX)
    d = tokens.shape[1]
    labels[:, -d:] = ids[:, -d:]
    return {
        "pixel_values": processor.images(demonstrations.images[idx]),
        "input_ids": ids,
        "attention_mask": mask,
        "labels": labels,
    }


def action_token_accuracy(model: OpenVLAModel, batch: dict[str, torch.Tensor]) -> float:
    """Fraction of action tokens predicted exactly (teacher forcing)."""
    with torch.no_grad():
        out = model(**batch)
    pred = out["logits"][:, :-1].argmax(-1)
    target = out["labels"][:, 1:]
    keep = target != IGNORE_INDEX
    return float((pred[keep] == target[keep]).float().mean())


def step_sampler(
    demonstrations: DemonstrationSteps, sampling: str, rng: np.random.Generator
) -> Callable[[int], np.ndarray]:
    """``draw(n)``: ``n`` step indices into ``demonstrations`` under ``sampling``.

    ``steps`` draws uniformly over all steps; ``episodes`` draws an episode uniformly, then a
    step uniformly within it (every episode weighs the same, whatever its length).
    """
    if sampling == "steps":
        return lambda n: rng.integers(0, len(demonstrations), size=n)
    if sampling != "episodes":
        raise ConfigError(
            f"sampling {sampling!r} is not one of {list(BC_SAMPLING)}",
            fix="use steps or episodes",
        )
    order = np.argsort(demonstrations.episode, kind="stable")
    _, starts, lengths = np.unique(
        demonstrations.episode[order], return_index=True, return_counts=True
    )

    def draw(n: int) -> np.ndarray:
        e = rng.integers(0, len(starts), size=n)
        return order[starts[e] + (rng.random(n) * lengths[e]).astype(np.int64)]

    return draw


class OrdinalLine(nn.Module):
    """Embedding-table parametrization: the rows ``ids`` lie on one line, evenly spaced.

    Row ``ids[k]`` is ``base + c_k * step``, ``c`` evenly from -1 to 1; ``base`` and ``step``
    start at the least-squares line through the rows they replace and train with the model.
    """

    def __init__(self, weight: torch.Tensor, ids: Sequence[int]) -> None:
        super().__init__()
        index = torch.as_tensor(list(ids), dtype=torch.long, device=weight.device)
        c = torch.linspace(-1.0, 1.0, len(index), device=weight.device, dtype=weight.dtype)
        rows = weight.detach()[index]
        mean = rows.mean(0)
        self.index: torch.Tensor
        self.c: torch.Tensor
        self.register_buffer("index", index)
        self.register_buffer("c", c)
        self.base = nn.Parameter(mean.clone())
        self.step = nn.Parameter(((c[:, None] * (rows - mean)).sum(0) / (c**2).sum()).clone())

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        """The table with the tied rows replaced."""
        out = weight.clone()
        out[self.index] = self.base + self.c[:, None] * self.step
        return out


def ordinal_token_ids(processor: OpenVLAProcessor, words: Sequence[str]) -> list[int]:
    """The single token id of each of ``words``.

    Raises:
        ConfigError: Fewer than two words, repeated words, or a word that is not one known
            token of the processor's tokenizer.
    """
    if len(words) < 2 or len(set(words)) != len(words):
        raise ConfigError(
            f"ordinal_words {list(words)!r} must be two or more distinct words",
            fix="give the scale's words in order, e.g. 1,2,3,4,5,6,7,8,9",
        )
    tok = processor.tokenizer
    ids = []
    for w in words:
        got = [int(i) for i in tok(w, add_special_tokens=False)["input_ids"]]
        if len(got) != 1 or got[0] == getattr(tok, "unk_token_id", None):
            raise ConfigError(
                f"ordinal word {w!r} is {len(got)} token(s) {got} of the tokenizer, not one "
                "known token",
                fix="use words the training prompts contain, each one token",
            )
        ids.append(got[0])
    return ids


def train_bc(
    model: OpenVLAModel,
    processor: OpenVLAProcessor,
    demonstrations: DemonstrationSteps,
    settings: BCSettings | None = None,
    unnorm_key: str | None = None,
    progress: Callable[[int, dict[str, float]], None] | None = None,
    dist: Distributed | None = None,
) -> list[dict[str, float]]:
    """Train ``model`` in place; returns the logged history (step, loss, token accuracy, s).

    Data-parallel under ``torchrun`` / ``accelerate launch``: every rank draws the same
    global batch of ``settings.batch_size`` steps and trains on its contiguous block, DDP
    averages the gradients, so the update (and the logged loss, averaged over ranks) equals
    the single-process one. ``progress`` is called on the main process only.

    Args:
        model: The model (trained in place; moved to ``dist.device``).
        processor: Its processor (prompts, images, action tokens).
        demonstrations: Training steps.
        settings: Hyperparameters.
        unnorm_key: Dataset statistics entry for the action normalisation.
        progress: ``progress(step, row)`` every ``settings.log_every`` steps.
        dist: The process context; None: :meth:`Distributed.from_env`.

    Raises:
        ConfigError: the global batch does not split evenly over the processes.
    """
    s = settings or BCSettings()
    dist = dist or Distributed.from_env(find_unused_parameters=True)
    global_batch = min(s.batch_size, len(demonstrations))
    dist.shard(global_batch)  # fail before training if the batch does not split evenly
    if s.ordinal_words:
        table: Any = model.language_model.get_input_embeddings()
        line = OrdinalLine(table.weight, ordinal_token_ids(processor, s.ordinal_words))
        parametrize.register_parametrization(table, "weight", line)
        try:
            return train_bc(
                model, processor, demonstrations, replace(s, ordinal_words=()), unnorm_key,
                progress, dist,
            )  # fmt: skip
        finally:  # a plain table again: the checkpoint is an ordinary OpenVLA
            parametrize.remove_parametrizations(table, "weight", leave_parametrized=True)
    rng = np.random.default_rng(s.seed)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=s.lr, weight_decay=s.weight_decay)
    warm = max(1, s.steps // 20)

    def lr_at(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, s.steps - warm)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    ddp_model, ddp_opt = dist.prepare(model, opt)  # identity in a plain single process
    draw = step_sampler(demonstrations, s.sampling, rng)
    history: list[dict[str, float]] = []
    t0 = time.perf_counter()
    running, count = 0.0, 0
    for step in range(s.steps):
        idx = draw(global_batch)  # same on every rank
        batch = make_batch(processor, demonstrations, idx[dist.shard(global_batch)], unnorm_key)
        batch = {k: v.to(dist.device, non_blocking=True) for k, v in batch.items()}
        with dist.autocast():
            loss = ddp_model(**batch)["loss"]
        ddp_opt.zero_grad(set_to_none=True)
        dist.backward(loss)
        dist.clip_grad_norm_(model.parameters(), s.grad_clip)
        ddp_opt.step()
        sched.step()
        running += dist.mean(loss)
        count += 1
        if (step + 1) % s.log_every == 0 or step + 1 == s.steps:
            model.eval()
            acc = dist.mean(action_token_accuracy(model, batch))  # equal tokens per rank
            model.train()
            row = {
                "step": step + 1,
                "loss": running / count,
                "token_acc": acc,
                "seconds": time.perf_counter() - t0,
            }
            running, count = 0.0, 0
            history.append(row)
            if progress is not None and dist.is_main:
                progress(step + 1, row)
    model.eval()
    return history
