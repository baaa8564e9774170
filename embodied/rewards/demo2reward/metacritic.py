"""The reference Meta-Critic: a transformers image-text-to-text model that SEES a labelled
reference demonstration and the failure clips, and rewrites the Critic's instruction.

Follows https://github.com/cgumbsch/Demo2Reward ``utils/critic.py: refine_prompt``:

* system turn: ``META_CRITIC_TEMPLATE`` (the principles; ``utils/prompts.py``);
* user turn, in order: ``_REFINE_INTRO``; the reference demonstration header; every
  ``nth_frame``-th frame (3) of the reference demonstration from a random offset drawn from
  ``0..nth_frame`` inclusive (``random.randint(0, nth_frame)``), each image followed by its
  ground-truth label; the current instruction; the TPR/TNR/FPR/FNR summary; up to
  ``num_fails`` (5) failure clips, each clip's frames as images followed by "Incorrect Critic
  output: ..."; the request for reasoning then instruction;
* sampling ``vlms/vlm_utils.py: EXPLORATION`` (temperature 1.3, top-p 0.97, top-k 50, 1000
  new tokens), through the processor's chat template (``vlms/qwen_utils.py: prompt_qwen``);
* the new instruction is the text after the last "Final Instruction:"
  (:func:`~embodied.rewards.demo2reward.prompts.parse_final_instruction`).

Departures (named): the reference demonstration is the first SUCCESSFUL demonstration of the
set (the reference takes demonstration 0, always an expert); labels are written "1"/"0" (the
reference writes ``str(label)`` of its dataset values, e.g. "True"/"0.0"); the instruction
shown is the template filled with that demonstration's task, and the answer is turned back
into a template by putting ``{task}`` where the task text appears (else appending it); only
the newly generated tokens are decoded (the reference decodes everything and splits at
"assistant"); the offset and the sampling seed come from the loop's seeded generator (the
reference uses the unseeded ``random`` module).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from embodied.errors import CheckpointError, ConfigError
from embodied.rewards.base import resolve_device, resolve_dtype
from embodied.rewards.clips import format_instruction
from embodied.rewards.demo2reward.demonstrations import LabelledDemonstration
from embodied.rewards.demo2reward.objective import Misclassified
from embodied.rewards.demo2reward.prompts import (
    CURRENT_INSTRUCTION,
    FAILURE_OUTPUT,
    FAILURES_HEADER,
    FINAL_REQUEST,
    META_CRITIC_SAMPLING,
    PERFORMANCE_HEADER,
    PERFORMANCE_LINES,
    REFERENCE_DEMO_HEADER,
    meta_critic_system_prompt,
    parse_final_instruction,
    refine_intro,
)
from embodied.rewards.demo2reward.proposers import (
    PROPOSERS,
    ProposalContext,
    Proposer,
    ensure_task,
)

NTH_FRAME = 3
"""Reference demonstration: every third frame (``refine_prompt(nth_frame=3)``)."""
NUM_FAILS = 5
"""Failure clips shown (``refine_prompt(num_fails=5)``)."""


def reference_frame_indices(n_frames: int, offset: int, nth_frame: int = NTH_FRAME) -> list[int]:
    """Frames of the reference demonstration shown: ``offset::nth_frame`` (reference slice)."""
    return list(range(n_frames))[offset::nth_frame]


def reference_demonstration(
    demonstrations: Any,
) -> LabelledDemonstration:
    """The demonstration shown as the labelled reference: the first successful one."""
    for d in demonstrations:
        if d.success:
            return d  # type: ignore[no-any-return]
    raise ConfigError(
        "the Meta-Critic needs a successful reference demonstration; none succeeds",
        fix="include at least one demonstration that reaches success",
    )


class ReferenceMetaCritic:
    """The reference Demo2Reward Meta-Critic (the default proposer).

    Args:
        model: Hub id or local folder of a transformers image-text-to-text model (loaded with
            ``AutoModelForImageTextToText`` + ``AutoProcessor``; no downloads at run time).
        device: ``"auto"``, ``"cpu"`` or ``"cuda[:N]"``.
        dtype: ``"auto"`` (bfloat16 on GPU), ``"bfloat16"``, ``"float16"``, ``"float32"``.
        real_robot: "a robot" instead of "a simulated robot" in the prompts.
        nth_frame: Show every ``nth_frame``-th reference frame (reference: 3).
        num_fails: Failure clips shown (reference: 5).
        sampling: ``generate`` settings (default: the reference's ``EXPLORATION``).
        image_size: Resize frames to this square side before the processor (None: as is).
        trust_remote_code: Passed to ``from_pretrained``.
        preloaded: ``(model, processor)`` to skip loading (e.g. the Critic's, single-model
            mode as in the reference when ``--meta_vlm`` is not given).
    """

    name = "metacritic"

    def __init__(
        self,
        model: str | None = None,
        device: str = "auto",
        dtype: str = "auto",
        real_robot: bool = False,
        nth_frame: int = NTH_FRAME,
        num_fails: int = NUM_FAILS,
        sampling: Mapping[str, Any] | None = None,
        image_size: int | None = None,
        trust_remote_code: bool = False,
        preloaded: tuple[Any, Any] | None = None,
    ) -> None:
        import torch

        if nth_frame < 1 or num_fails < 0:
            raise ConfigError(f"nth_frame ({nth_frame}) must be >= 1, num_fails ({num_fails}) >= 0")
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        if preloaded is not None:
            self.model, self.processor = preloaded
        else:
            if not model:
                raise CheckpointError(
                    "the Meta-Critic needs an image-text-to-text model",
                    fix="pass a hub id or folder (--proposer-model), or --proposer "
                    "phrase-bank-ablation for the no-model ablation",
                )
            self.model, self.processor = self._load(model, self.dtype, trust_remote_code)
            self.model = self.model.to(device=self.device, dtype=self.dtype)
        self.model = self.model.eval()
        self.dtype = getattr(self.model, "dtype", self.dtype)
        self.tokenizer = getattr(self.processor, "tokenizer", self.processor)
        self.real_robot = real_robot
        self.system_prompt = meta_critic_system_prompt(real_robot)
        self.nth_frame = nth_frame
        self.num_fails = num_fails
        self.sampling = dict(META_CRITIC_SAMPLING if sampling is None else sampling)
        self.image_size = image_size
        self.last_reply = ""
        self._torch = torch

    @staticmethod
    def _load(model: str, dtype: Any, remote: bool) -> tuple[Any, Any]:
        from transformers import AutoModelForImageTextToText, AutoProcessor

        try:
            return (
                AutoModelForImageTextToText.from_pretrained(
                    model, dtype=dtype, trust_remote_code=remote
                ),
                AutoProcessor.from_pretrained(model, trust_remote_code=remote),
            )
        except (OSError, ValueError, KeyError) as exc:
            raise CheckpointError(
                f"cannot load Meta-Critic model {model!r}: {exc}",
                fix="pass a local folder or cached hub id of an image-text-to-text model "
                "whose processor has a chat template",
            ) from exc

    def _image(self, frame: np.ndarray) -> Any:
        from PIL import Image

        im = Image.fromarray(np.asarray(frame))
        if self.image_size is not None:
            im = im.resize((self.image_size, self.image_size), Image.Resampling.BILINEAR)
        return im

    def messages(
        self, ctx: ProposalContext, offset: int | None = None
    ) -> tuple[list[dict[str, Any]], list[int]]:
        """The reference chat for ``ctx`` and the reference frame indices shown.

        Args:
            ctx: The proposal context (needs ``demonstrations``).
            offset: First reference frame (default: drawn from ``0..nth_frame`` with
                ``ctx.rng``, inclusive as ``random.randint``).

        Returns:
            ``(messages, frame_indices)``; image entries hold PIL images (``"image"``).
        """
        ref = reference_demonstration(ctx.demonstrations)
        if offset is None:
            offset = int(ctx.rng.integers(0, self.nth_frame + 1))
        idx = reference_frame_indices(len(ref), offset, self.nth_frame)
        content: list[dict[str, Any]] = [
            {"type": "text", "text": refine_intro(self.real_robot)},
            {"type": "text", "text": REFERENCE_DEMO_HEADER},
        ]
        for i in idx:
            content.append({"type": "image", "image": self._image(ref.frames[i])})
            content.append({"type": "text", "text": str(int(ref.labels[i]))})
        instruction = format_instruction(ctx.template, ref.task)
        content.append(
            {"type": "text", "text": CURRENT_INSTRUCTION.format(instruction=instruction)}
        )
        r = ctx.rates
        perf = "\n".join(
            line.format(tpr=r.tpr, tnr=r.tnr, fpr=r.fpr, fnr=r.fnr) for line in PERFORMANCE_LINES
        )
        content.append({"type": "text", "text": PERFORMANCE_HEADER + perf})
        fails: list[Misclassified] = list(ctx.misclassified)[: self.num_fails]
        if fails:
            content.append({"type": "text", "text": FAILURES_HEADER})
            for m in fails:
                clip = m.clip
                for frame in clip if clip is not None else []:
                    content.append({"type": "image", "image": self._image(frame)})
                content.append({"type": "text", "text": FAILURE_OUTPUT.format(output=m.output)})
        content.append({"type": "text", "text": FINAL_REQUEST})
        messages = [
            {"role": "system", "content": [{"type": "text", "text": self.system_prompt}]},
            {"role": "user", "content": content},
        ]
        return messages, idx

    def generate(self, messages: list[dict[str, Any]], seed: int) -> str:
        """The model's reply (new tokens only) to ``messages`` with :attr:`sampling`."""
        torch = self._torch
        images = [
            item["image"]
            for m in messages
            for item in m["content"]
            if item.get("type") == "image" and "image" in item
        ]
        template_messages = [
            {
                "role": m["role"],
                "content": [
                    {"type": "image"} if item.get("type") == "image" else item
                    for item in m["content"]
                ],
            }
            for m in messages
        ]
        text = self.processor.apply_chat_template(
            template_messages, add_generation_prompt=True, tokenize=False
        )
        inputs = self.processor(
            text=[text], images=[images] if images else None, return_tensors="pt"
        )
        inputs = {
            k: (v.to(self.device, dtype=self.dtype) if v.is_floating_point() else v.to(self.device))
            if hasattr(v, "to")
            else v
            for k, v in inputs.items()
        }
        eos = self.tokenizer.eos_token_id
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos
        torch.manual_seed(seed)
        with torch.inference_mode():
            out = self.model.generate(
                **inputs, eos_token_id=eos, pad_token_id=pad, use_cache=True, **self.sampling
            )
        new = out[0, inputs["input_ids"].shape[1] :]
        return str(self.tokenizer.decode(new, skip_special_tokens=True))

    def propose(self, ctx: ProposalContext) -> str:
        """A new template: the text after "Final Instruction:" with ``{task}`` restored."""
        messages, _ = self.messages(ctx)
        self.last_reply = self.generate(messages, seed=int(ctx.rng.integers(2**31)))
        ref = reference_demonstration(ctx.demonstrations)
        tasks = sorted({*ctx.tasks, ref.task}, key=len, reverse=True)
        return ensure_task(parse_final_instruction(self.last_reply), tasks)


def default_proposer(judge: Any) -> Proposer:
    """The reference Meta-Critic on the judge's own model (single-model mode, the reference
    default), when the judge is a transformers image-text-to-text judge.

    Raises:
        ConfigError: the judge has no image-text-to-text model to share.
    """
    model, processor = getattr(judge, "model", None), getattr(judge, "processor", None)
    if not (hasattr(model, "generate") and hasattr(processor, "apply_chat_template")):
        raise ConfigError(
            f"no proposer given and the judge ({type(judge).__name__}) has no "
            "image-text-to-text model to serve as the Meta-Critic",
            fix="pass proposer=ReferenceMetaCritic(model=...) (--proposer-model), or the "
            "ablation PhraseBankAblation() (--proposer phrase-bank-ablation)",
        )
    return ReferenceMetaCritic(
        device=str(getattr(judge, "device", "auto")),
        real_robot=bool(getattr(judge, "real_robot", False)),
        preloaded=(model, processor),
    )


PROPOSERS.register(
    "metacritic",
    lambda **kw: ReferenceMetaCritic(**kw),
    help="the reference multimodal Meta-Critic (model= image-text-to-text hub id or folder)",
)
