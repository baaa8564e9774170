"""`embodied.tokenizers.build_word_tokenizer`: the one word-level tokenizer of tiny models."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import AutoTokenizer

from embodied.errors import ConfigError
from embodied.tokenizers import build_word_tokenizer


def test_ids_are_specials_then_words_then_fillers_then_added_roles(tmp_path: Path) -> None:
    tok = build_word_tokenizer(
        ["Pick", "up", " pick ", "", "<s>", "bowl"],
        specials=["<unk>", "<s>", "</s>"],
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<PAD>",
        add_bos=True,
        vocab_size=10,
        filler="<act_{}>",
        reserve=3,
    )
    vocab = tok.get_vocab()
    assert [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])] == [
        "<unk>", "<s>", "</s>", "pick", "up", "bowl", "<act_0>", "<act_1>", "<act_2>", "<act_3>",
        "<PAD>",
    ]  # fmt: skip
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (1, 2, 10)
    assert tok("PICK up the bowl")["input_ids"] == [1, 3, 4, 0, 5]  # BOS first, lower-cased
    tok.save_pretrained(tmp_path)
    back = AutoTokenizer.from_pretrained(tmp_path)
    assert back("PICK up the bowl")["input_ids"] == [1, 3, 4, 0, 5] and back.pad_token_id == 10


def test_splits_and_named_extra_specials() -> None:
    words = ["12", "1", "2", "bowls", "?!", "?", "!"]
    specials = ["<pad>", "<unk>", "<image>"]
    plain = build_word_tokenizer(words, specials=specials, split="whitespace")
    marks = build_word_tokenizer(
        words,
        specials=specials,
        pad_token="<pad>",
        extra_special_tokens={"image_token": "<image>"},
        split="punctuation",
        chat_template="{% for m in messages %}{{ m['content'] }}{% endfor %}",
    )
    cut = ["12", "bowls", "?!"], ["1", "2", "bowls", "?", "!"]
    for tok, expected in zip((plain, marks), cut, strict=True):
        ids = tok("12 bowls?!")["input_ids"]
        assert tok.convert_ids_to_tokens(ids) == expected
    assert marks.pad_token_id == 0 and marks.image_token == "<image>"
    assert marks.image_token_id == 2 and plain.bos_token is None
    text = marks.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert text == "hi"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"specials": ["<pad>"]}, "not in specials"),
        ({"specials": ["<unk>"], "add_bos": True, "bos_token": "<s>"}, "add_bos"),
        ({"specials": ["<unk>"], "reserve": 2}, "needs a vocab_size"),
        ({"specials": ["<unk>"], "vocab_size": 4, "reserve": 2}, "no room for 2 reserved"),
        ({"specials": ["<unk>"], "split": "bytes"}, "split 'bytes' unknown"),
    ],
)
def test_bad_settings_are_config_errors(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        build_word_tokenizer(["a", "b"], **kwargs)  # type: ignore[arg-type]
