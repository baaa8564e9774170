"""Word-level tokenizers built in code (no downloads), for tiny models in tests and benchmarks.

Tiny random models of real transformers families (the judges' LLaVA, CLIP, SigLIP and Llama in
:mod:`embodied.rewards.tiny`; OpenVLA in :mod:`policies.openvla`) need a real
``PreTrainedTokenizerFast`` that saves and loads like a hub tokenizer.
:func:`build_word_tokenizer` makes one from a word list: one id per lower-cased word, anything
else ``unk``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from embodied.errors import ConfigError

Split = Literal["whitespace", "punctuation"]
"""How text is cut into words before the vocabulary lookup:

* ``"whitespace"``: runs of word characters and runs of other non-space characters
  (``"12 bowls?!"`` -> ``12``, ``bowls``, ``?!``); tokenizers' ``Whitespace``.
* ``"punctuation"``: on whitespace, then every punctuation mark and every digit apart
  (-> ``1``, ``2``, ``bowls``, ``?``, ``!``).
"""


def pre_tokenizer(split: Split) -> pre_tokenizers.PreTokenizer:
    """The tokenizers pre-tokenizer of ``split`` (e.g. to list the words of a text as cut)."""
    if split == "whitespace":
        return pre_tokenizers.Whitespace()
    if split == "punctuation":
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.WhitespaceSplit(),
                pre_tokenizers.Punctuation(),
                pre_tokenizers.Digits(individual_digits=True),
            ]
        )
    raise ConfigError(f"split {split!r} unknown", fix="use 'whitespace' or 'punctuation'")


def build_word_tokenizer(
    words: Iterable[str],
    *,
    specials: Sequence[str],
    unk_token: str = "<unk>",
    bos_token: str | None = None,
    eos_token: str | None = None,
    pad_token: str | None = None,
    extra_special_tokens: Mapping[str, str] | None = None,
    split: Split = "whitespace",
    add_bos: bool = False,
    vocab_size: int | None = None,
    filler: str = "<extra_{}>",
    reserve: int = 0,
    chat_template: str | None = None,
) -> PreTrainedTokenizerFast:
    """A word-level ``PreTrainedTokenizerFast`` (lower-casing normalizer) built in code.

    Ids: ``specials`` first (0, 1, ...), then ``words`` (stripped, lower-cased, first occurrence
    kept, specials and empty words skipped), then, with ``vocab_size``, ``filler`` tokens up to
    exactly ``vocab_size`` ids. A role token (``bos_token``, ``eos_token``, ``pad_token``) not
    among ``specials`` is added after all of them, as an added special token (OpenVLA's pad
    token sits at id ``vocab_size``).

    Args:
        words: The vocabulary words, in id order.
        specials: Special tokens with the first ids, in order; must hold ``unk_token`` and
            the values of ``extra_special_tokens``.
        unk_token: The token of every word not in the vocabulary.
        bos_token: Beginning-of-sequence token, if any.
        eos_token: End-of-sequence token, if any.
        pad_token: Padding token, if any.
        extra_special_tokens: Named extra special tokens (``{"image_token": "<image>"}``),
            readable as tokenizer attributes (``tok.image_token``).
        split: How text is cut into words (:data:`Split`).
        add_bos: Start every encoding with ``bos_token`` (Llama-style).
        vocab_size: Pad the vocabulary with fillers to exactly this many ids.
        filler: Filler token pattern with one ``{}`` for its index (0, 1, ...).
        reserve: At least this many filler ids must remain (e.g. OpenVLA's 256 action
            tokens, the last ids of the vocabulary); needs ``vocab_size``.
        chat_template: Jinja chat template (``tok.apply_chat_template``).

    Raises:
        ConfigError: ``unk_token``, an extra special token or (with ``add_bos``) the
            ``bos_token`` not in ``specials``, ``reserve`` without ``vocab_size``, or a vocabulary that
            leaves fewer than ``reserve`` filler ids.
    """
    extra = dict(extra_special_tokens or {})
    missing = [t for t in (unk_token, *extra.values()) if t not in specials]
    if missing:
        raise ConfigError(
            f"special tokens {missing} are not in specials {list(specials)}",
            fix="list the unk token and every extra special token in specials",
        )
    if add_bos and bos_token not in specials:
        raise ConfigError(
            f"add_bos=True needs a bos_token in specials, got {bos_token!r}",
            fix="pass bos_token='<s>' and list it in specials",
        )
    if reserve and vocab_size is None:
        raise ConfigError(f"reserve={reserve} needs a vocab_size", fix="pass vocab_size")
    vocab: dict[str, int] = {}
    for token in [*specials, *(w.strip().lower() for w in words)]:
        if token:
            vocab.setdefault(token, len(vocab))
    if vocab_size is not None:
        if len(vocab) > vocab_size - reserve:
            raise ConfigError(
                f"{len(vocab)} words leave no room for {reserve} reserved tokens "
                f"({filler.format('i')}) in vocab_size {vocab_size}",
                fix="raise vocab_size",
            )
        i = 0
        while len(vocab) < vocab_size:
            vocab[filler.format(i)] = len(vocab)
            i += 1
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=unk_token))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizer(split)
    if add_bos:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos_token} $A",
            pair=f"{bos_token} $A $B",
            special_tokens=[(str(bos_token), vocab[str(bos_token)])],
        )
    roles = {"bos_token": bos_token, "eos_token": eos_token, "pad_token": pad_token}
    inside = {k: v for k, v in roles.items() if v is not None and v in vocab}
    after: dict[str, Any] = {k: v for k, v in roles.items() if v is not None and v not in vocab}
    kwargs = {"extra_special_tokens": extra} if extra else {}
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=unk_token, **inside, **kwargs)
    if after:
        fast.add_special_tokens(after)
    if chat_template is not None:
        fast.chat_template = chat_template
    return fast
