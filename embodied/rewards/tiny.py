"""Tiny random-initialised models of real transformers families, built offline.

No pretrained vision-language weights can be downloaded on every machine, so tests and
benchmarks build tiny configs of real model classes (LLaVA for the generative judge, CLIP and
SigLIP for the contrastive judge) with a word-level tokenizer made here, save them with
``save_pretrained`` and load them back through the judges' normal loading code
(``AutoModel*.from_pretrained`` + ``AutoProcessor.from_pretrained``). Weights are random, so
scores are meaningless; the point is that the whole real code path runs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from embodied.errors import ConfigError
from embodied.tokenizers import build_word_tokenizer

_WORDS = (
    "evaluate the behavior of this robot . robot was instructed with task : instruction answer "
    "reach red green blue target arm gripper point mass goal around obstacle touch touching "
    "moved moving toward away near far from success failure did not yes no is it a an and or "
    "clip frames earlier current frame show shows has have completed complete done only if "
    "write new improved better instruction for judge previous true positive negative rate "
    "false misclassified reply with one line , ? ! user assistant system"
)
_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }} :"
    "{% if message['content'] is string %} {{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %} <image>{% elif item['type'] == 'text' %} {{ item['text'] }}"
    "{% endif %}{% endfor %}{% endif %} </s> {% endfor %}"
    "{% if add_generation_prompt %}assistant :{% endif %}"
)


def build_tiny_tokenizer(extra_words: str = "") -> Any:
    """A word-level ``PreTrainedTokenizerFast`` with ``<image>``, digits and a chat template.

    Ids: ``<pad>``, ``<unk>``, ``<s>``, ``</s>``, ``<image>``, then the sorted words (the
    judges' prompt words, ``extra_words`` and the ten digits); punctuation marks and digits
    are cut apart.

    Returns:
        The tokenizer (``transformers.PreTrainedTokenizerFast``).
    """
    specials = ["<pad>", "<unk>", "<s>", "</s>", "<image>"]
    words = sorted(set((_WORDS + " " + extra_words).lower().split()) | set("0123456789"))
    return build_word_tokenizer(
        words,
        specials=specials,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        extra_special_tokens={"image_token": "<image>"},
        split="punctuation",
        chat_template=_CHAT_TEMPLATE,
    )


def _tiny_llama_config(tok: Any) -> Any:
    """A 2-layer, 32-wide Llama config sized to the tiny tokenizer ``tok``."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )


def build_tiny_llava(path: str | os.PathLike[str], image_size: int = 32, seed: int = 0) -> Path:
    """Save a tiny random LLaVA (CLIP vision tower + Llama LM) with its processor at ``path``.

    Args:
        path: Output folder (created).
        image_size: Vision tower input side in pixels (patch size 8).
        seed: Torch seed for the random weights.

    Returns:
        The folder, loadable with ``AutoModelForImageTextToText`` + ``AutoProcessor``.
    """
    import torch
    from transformers import (
        CLIPImageProcessorPil,
        CLIPVisionConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tiny_tokenizer()
    patch = 8
    vision = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=image_size,
        patch_size=patch,
        projection_dim=32,
    )
    text = _tiny_llama_config(tok)
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=tok.convert_tokens_to_ids("<image>"),  # type: ignore[attr-defined]
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
    )
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(config).eval()
    image_processor = CLIPImageProcessorPil(
        size={"shortest_edge": image_size},
        crop_size={"height": image_size, "width": image_size},
    )
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tok,
        patch_size=patch,
        vision_feature_select_strategy="default",
        chat_template=_CHAT_TEMPLATE,
        num_additional_image_tokens=1,
    )
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out


def build_tiny_clip(
    path: str | os.PathLike[str], family: str = "clip", image_size: int = 32, seed: int = 0
) -> Path:
    """Save a tiny random CLIP or SigLIP model with its processor at ``path``.

    Args:
        path: Output folder (created).
        family: ``"clip"`` (CLIPModel) or ``"siglip"`` (SiglipModel).
        image_size: Image side in pixels (patch size 8).
        seed: Torch seed for the random weights.

    Returns:
        The folder, loadable with ``AutoModel`` + ``AutoProcessor``.
    """
    import torch
    import transformers as tf

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tiny_tokenizer()
    common: dict[str, Any] = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
    }
    torch.manual_seed(seed)
    model: Any
    processor: Any
    text_cfg: Any
    vis_cfg: Any
    image_processor: Any
    if family == "clip":
        text_cfg = tf.CLIPTextConfig(
            vocab_size=len(tok),
            max_position_embeddings=64,  # type: ignore[arg-type]
            pad_token_id=tok.pad_token_id,  # type: ignore[attr-defined]
            bos_token_id=tok.bos_token_id,  # type: ignore[attr-defined]
            eos_token_id=tok.eos_token_id,
            **common,
        )  # type: ignore[attr-defined]
        vis_cfg = tf.CLIPVisionConfig(image_size=image_size, patch_size=8, **common)
        model = tf.CLIPModel(
            tf.CLIPConfig(
                text_config=text_cfg.to_dict(), vision_config=vis_cfg.to_dict(), projection_dim=32
            )
        )
        image_processor = tf.CLIPImageProcessorPil(
            size={"shortest_edge": image_size},
            crop_size={"height": image_size, "width": image_size},
        )
        processor = tf.CLIPProcessor(image_processor=image_processor, tokenizer=tok)
    elif family == "siglip":
        text_cfg = tf.SiglipTextConfig(
            vocab_size=len(tok),
            max_position_embeddings=64,  # type: ignore[arg-type]
            pad_token_id=tok.pad_token_id,
            **common,
        )  # type: ignore[attr-defined]
        vis_cfg = tf.SiglipVisionConfig(image_size=image_size, patch_size=8, **common)
        model = tf.SiglipModel(
            tf.SiglipConfig(text_config=text_cfg.to_dict(), vision_config=vis_cfg.to_dict())
        )
        image_processor = tf.SiglipImageProcessorPil(
            size={"height": image_size, "width": image_size}
        )
        processor = tf.SiglipProcessor(image_processor=image_processor, tokenizer=tok)
    else:
        raise ConfigError(
            f"unknown tiny contrastive family {family!r}", fix="use 'clip' or 'siglip'"
        )
    model.eval().save_pretrained(out)
    processor.save_pretrained(out)
    return out


def build_tiny_llm(path: str | os.PathLike[str], seed: int = 0) -> Path:
    """Save a tiny random Llama causal LM with the word-level tokenizer at ``path``.

    Returns:
        The folder, loadable with ``AutoModelForCausalLM`` + ``AutoTokenizer``.
    """
    import torch
    from transformers import LlamaForCausalLM

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tiny_tokenizer()
    config = _tiny_llama_config(tok)
    torch.manual_seed(seed)
    LlamaForCausalLM(config).eval().save_pretrained(out)
    tok.save_pretrained(out)  # type: ignore[attr-defined]
    return out
