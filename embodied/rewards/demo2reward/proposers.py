"""Instruction proposers for Demo2Reward.

A proposer reads the current best instruction template, its TPR/TNR/FPR/FNR and up to five
misclassified clips, and writes a new template (with ``{task}``):

* :class:`~embodied.rewards.demo2reward.metacritic.ReferenceMetaCritic` (``metacritic``, the
  default) - the reference's multimodal Meta-Critic (any transformers image-text-to-text
  model).
* :class:`PhraseBankAblation` (``phrase-bank-ablation``) - ABLATION, not Demo2Reward: generic
  wording edits from a fixed phrase bank, no model. It names no failure kind (no hovering,
  touching, near misses, colours), so it cannot leak held-out failure kinds into the search.
* :class:`LLMProposer` (``llm``) - a text-only prompt to a transformers language model; not
  the reference either (it sees no frames).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from embodied.errors import CheckpointError
from embodied.registry import Registry
from embodied.rewards.base import resolve_device, resolve_dtype
from embodied.rewards.calibration import Rates
from embodied.rewards.clips import TASK_FIELD
from embodied.rewards.demo2reward.demonstrations import LabelledDemonstration
from embodied.rewards.demo2reward.objective import Misclassified
from embodied.rewards.demo2reward.prompts import generic_template

DEFAULT_TEMPLATE = generic_template(real_robot=False)
"""Demo2Reward's starting instruction, the reference's default (simulated-robot) wording:
"Evaluate the behavior of this simulated robot. The robot was instructed with the task:
{task}." (utils/prompts.py: build_generic_prompt)."""

REAL_ROBOT_TEMPLATE = generic_template(real_robot=True)
"""The starting instruction under the reference's ``--real_robot``: "Evaluate the behavior of
this robot. ..."; pass it as ``Demo2RewardConfig(template=...)`` together with
``real_robot=True`` for the Critic and the Meta-Critic."""


@dataclass
class ProposalContext:
    """What a proposer sees at one iteration.

    Attributes:
        template: The current best template.
        rates: Its rates on the demonstrations.
        j: Its objective.
        misclassified: The clips to show (the loop shuffles all of the current best's
            misclassified clips and passes the first ``max_misclassified``).
        tasks: The demonstrations' tasks.
        iteration: Iteration within the repeat (from 1).
        rng: The repeat's generator (offsets, sampling seeds).
        tried: Templates evaluated so far.
        demonstrations: The optimisation demonstrations (the Meta-Critic's reference).
    """

    template: str
    rates: Rates
    j: float
    misclassified: list[Misclassified]
    tasks: list[str]
    iteration: int
    rng: np.random.Generator
    tried: set[str] = field(default_factory=set)
    demonstrations: Sequence[LabelledDemonstration] = ()


@runtime_checkable
class Proposer(Protocol):
    """Writes a new instruction template from the current best and its errors."""

    def propose(self, ctx: ProposalContext) -> str:
        """A new template containing ``{task}``."""
        ...


PROPOSERS: Registry[Proposer] = Registry("instruction proposer")

# ABLATION phrase bank: generic wording edits only. No phrase may name a failure kind of any
# task (approaching, near/far/close, hovering, above, touching, gripper, target, colours,
# wrong object, blocked routes): tests/rewards/test_rewards_metacritic.py checks it.
PARAPHRASES = (
    DEFAULT_TEMPLATE,
    "The robot was asked to {task}. Has it done so in the current frame?",
    "{task}.",
    "The robot has completed the task: {task}.",
    "Success means the robot has finished the task: {task}.",
    "Task: {task}. The task is complete in the last frame.",
    "Did the robot {task}? Only the final state counts.",
    "In the current frame the robot has already managed to {task}.",
    "Judge whether the robot has accomplished its task, {task}, by the current frame.",
    "Look at the last frame: the robot did {task}.",
)
STRICT_CLAUSES = (
    "Only count it as success if the task is fully completed in the current frame.",
    "Base the decision on clear visual evidence in the frames.",
    "If the outcome is ambiguous, the task is not completed.",
    "Partial progress does not count.",
    "The task must be finished, not in progress.",
    "Done: {task}.",
)
LENIENT_CLAUSES = (
    "It counts as soon as the task is completed, even briefly.",
    "Minor imperfections do not matter once the task is completed.",
)
NEGATIONS = (
    "The task is not merely in progress.",
    "The task is not only partly done.",
    "An unfinished attempt is not a success.",
)

_SENTENCE = re.compile(r"(?<=[.?!])\s+")


def sentences(template: str) -> list[str]:
    """Split a template into sentences."""
    return [s for s in _SENTENCE.split(template.strip()) if s]


def ensure_task(text: str, tasks: list[str] | None = None) -> str:
    """Make ``text`` a template: put ``{task}`` back where a task was written out, or append it."""
    text = text.strip().strip('"').strip("'").strip()
    for task in tasks or []:
        if task and task in text and TASK_FIELD not in text:
            text = text.replace(task, TASK_FIELD)
    if TASK_FIELD not in text:
        text = f"{text.rstrip('.')}. The task: {TASK_FIELD}." if text else DEFAULT_TEMPLATE
    return text


class PhraseBankAblation:
    """ABLATION (not Demo2Reward): generic phrase-bank edits steered by the error mix.

    Operators: swap the lead sentence for a paraphrase; add a generic strictness or negation
    clause when false positives dominate, a lenient clause when false negatives do; drop or
    reorder sentences. Never proposes a template already tried. Sees no frames and the
    phrases name no failure kind; use it only as the no-model ablation of the reference
    Meta-Critic (:class:`~embodied.rewards.demo2reward.metacritic.ReferenceMetaCritic`).

    Args:
        max_sentences: Longest template built (sentences).
    """

    name = "phrase-bank-ablation"

    def __init__(self, max_sentences: int = 5) -> None:
        self.max_sentences = max_sentences

    def _mutate(self, template: str, r: Rates, rng: np.random.Generator) -> str:
        parts = sentences(template)
        fp_heavy = r.fpr >= r.fnr
        ops = ["paraphrase", "strict", "negate", "drop", "reorder", "lenient"]
        w = np.array(
            [
                2.0,
                3.0 if fp_heavy else 0.5,
                2.0 if fp_heavy else 0.3,
                1.0 if len(parts) > 1 else 0.0,
                0.5 if len(parts) > 1 else 0.0,
                0.3 if fp_heavy else 2.0,
            ]
        )
        if len(parts) >= self.max_sentences:
            w[1] = w[2] = w[5] = 0.0
        op = ops[int(rng.choice(len(ops), p=w / w.sum()))]
        if op == "paraphrase":
            lead = [i for i, s in enumerate(parts) if TASK_FIELD in s]
            i = lead[0] if lead else 0
            parts[i] = str(rng.choice(PARAPHRASES))
        elif op in ("strict", "negate", "lenient"):
            bank = {"strict": STRICT_CLAUSES, "negate": NEGATIONS, "lenient": LENIENT_CLAUSES}[op]
            parts.append(str(rng.choice(bank)))
        elif op == "drop":
            del parts[int(rng.integers(len(parts)))]
        elif op == "reorder":
            parts.insert(0, parts.pop())
        # paraphrases hold several sentences: split again, then keep each sentence once
        return ensure_task(" ".join(dict.fromkeys(sentences(" ".join(parts)))))

    def propose(self, ctx: ProposalContext) -> str:
        """A mutated template not tried before (up to 50 draws)."""
        cand = ctx.template
        for _ in range(50):
            cand = self._mutate(ctx.template, ctx.rates, ctx.rng)
            if cand not in ctx.tried and cand != ctx.template:
                return cand
        return cand


META_PROMPT = """You improve the instruction given to a vision-language reward model that judges \
whether a robot has completed its task in the current camera frame.
The instruction must contain the placeholder {{task}} where the task goes.
Current instruction: {template}
Results on labelled demonstrations: TPR {tpr:.1f}%, TNR {tnr:.1f}%, FPR {fpr:.1f}%, \
FNR {fnr:.1f}%. False positives matter most.
Misclassified examples:
{examples}
Write one improved instruction on a single line and nothing else."""


class LLMProposer:
    """Proposes templates with a transformers model's ``generate`` (text LLM or VLM).

    Args:
        model: Hub id or local folder (AutoModelForCausalLM, else AutoModelForImageTextToText).
        device: ``"auto"``, ``"cpu"`` or ``"cuda[:N]"``.
        max_new_tokens: Generation length.
        temperature: Sampling temperature (> 0 samples; 0 is greedy).
        fallback: Proposer used when the model's output is unusable (empty; default: the
            phrase-bank ablation).
        preloaded: ``(model, tokenizer_or_processor)`` to skip loading.
    """

    name = "llm"

    def __init__(
        self,
        model: str | None = None,
        device: str = "auto",
        max_new_tokens: int = 64,
        temperature: float = 0.8,
        fallback: Proposer | None = None,
        preloaded: tuple[Any, Any] | None = None,
    ) -> None:
        import torch

        self.device = resolve_device(device)
        dtype = resolve_dtype("auto", self.device)
        if preloaded is not None:
            self.model, self.tokenizer = preloaded
        else:
            if not model:
                raise CheckpointError("LLMProposer needs a model", fix="pass a hub id or folder")
            self.model, self.tokenizer = self._load(model, dtype)
        self.model = self.model.to(self.device).eval()
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.fallback = fallback or PhraseBankAblation()
        self.fallbacks = 0
        self._torch = torch

    @staticmethod
    def _load(model: str, dtype: Any) -> tuple[Any, Any]:
        from transformers import (
            AutoModelForCausalLM,
            AutoModelForImageTextToText,
            AutoProcessor,
            AutoTokenizer,
        )

        try:
            return (
                AutoModelForCausalLM.from_pretrained(model, dtype=dtype),
                AutoTokenizer.from_pretrained(model),
            )
        except (OSError, ValueError):
            pass
        try:
            return (
                AutoModelForImageTextToText.from_pretrained(model, dtype=dtype),
                AutoProcessor.from_pretrained(model),
            )
        except (OSError, ValueError) as exc:
            raise CheckpointError(
                f"cannot load proposer model {model!r}: {exc}",
                fix="pass a local folder or cached hub id of an instruction-tuned LLM or VLM",
            ) from exc

    def prompt(self, ctx: ProposalContext) -> str:
        """The meta-prompt for ``ctx``."""
        examples = "\n".join(f"- {m.describe()}" for m in ctx.misclassified) or "- none"
        r = ctx.rates
        return META_PROMPT.format(
            template=ctx.template, tpr=r.tpr, tnr=r.tnr, fpr=r.fpr, fnr=r.fnr, examples=examples
        )

    def generate(self, text: str, seed: int) -> str:
        """Generate a reply to ``text`` (chat template when the tokenizer has one)."""
        torch = self._torch
        tok = getattr(self.tokenizer, "tokenizer", self.tokenizer)
        messages = [{"role": "user", "content": text}]
        if getattr(self.tokenizer, "chat_template", None) or getattr(tok, "chat_template", None):
            text = self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False
            )
        enc = tok(text, return_tensors="pt").to(self.device)
        torch.manual_seed(seed)
        kw: dict[str, Any] = {
            "max_new_tokens": self.max_new_tokens,
            "pad_token_id": tok.pad_token_id or tok.eos_token_id,
        }
        if self.temperature > 0:
            kw.update(do_sample=True, temperature=self.temperature)
        else:
            kw.update(do_sample=False)
        with torch.inference_mode():
            out = self.model.generate(**enc, **kw)
        return str(tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True))

    def propose(self, ctx: ProposalContext) -> str:
        """The model's instruction (first non-empty line, ``{task}`` enforced)."""
        reply = self.generate(self.prompt(ctx), seed=int(ctx.rng.integers(2**31)))
        lines = [ln.strip() for ln in reply.splitlines() if ln.strip()]
        if not lines or len(lines[0]) < 3:
            self.fallbacks += 1
            return self.fallback.propose(ctx)
        return ensure_task(lines[0][:400], ctx.tasks)


PROPOSERS.register(
    "phrase-bank-ablation",
    lambda **kw: PhraseBankAblation(**kw),
    help="ABLATION: generic phrase-bank wording edits, no model",
)
PROPOSERS.register(
    "llm", lambda **kw: LLMProposer(**kw), help="text-only transformers generate (model=)"
)
