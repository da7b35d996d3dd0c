"""``encode_text``: the backend's ids where they equal the wrapper's, the wrapper's everywhere else."""

from __future__ import annotations

from radixlm.runtime.pooling.fast_tokenize import encode_text
from radixlm.runtime.weights.tokenizer_files import tokenizer_for
from tests.helpers.tokenizers import tiny_byte_level_tokenizer, tiny_sentencepiece_tokenizer

TEXTS = ["hello world", "  two  spaces, tabs\tand é ü 漢字", "<|end|> a special token inside", "x" * 300]


def test_same_ids_as_the_wrapper():
    minilm = tokenizer_for("all-minilm-l6-v2")  # BERT's [CLS] ... [SEP], and a 128-token truncation saved
    for tokenizer in (minilm, tiny_byte_level_tokenizer(), tiny_sentencepiece_tokenizer()):
        for text in TEXTS:
            assert encode_text(tokenizer, text) == list(tokenizer(text)["input_ids"]), (tokenizer, text)
    assert minilm._radixlm_backend_ok is True  # the shortcut is on for a plain tokenizer


def test_a_mismatch_turns_the_shortcut_off():
    tokenizer = tiny_byte_level_tokenizer()
    tokenizer("warm")  # the wrapper clears any truncation the backend was saved with
    backend = tokenizer._tokenizer

    class Lying:  # the backend, but its own ``encode`` answers wrong ids
        def __getattr__(self, name):
            return getattr(backend, name)

        def encode(self, text, add_special_tokens=True):
            return type("E", (), {"ids": [1, 2, 3]})()

    tokenizer._tokenizer = Lying()
    Lying.__module__ = "tokenizers.fake"
    try:
        assert encode_text(tokenizer, "abc") != [1, 2, 3]
        assert tokenizer._radixlm_backend_ok is False
    finally:
        tokenizer._tokenizer = backend
    assert encode_text(tokenizer, "abc") == list(tokenizer("abc")["input_ids"])


def test_a_class_that_encodes_its_own_way_is_left_alone():
    base = tiny_byte_level_tokenizer()

    class Shouting(type(base)):
        def __call__(self, text, **kwargs):
            return super().__call__(text.upper(), **kwargs)

    base.__class__ = Shouting
    assert encode_text(base, "abc") == list(base("abc")["input_ids"])
    assert not hasattr(base, "_radixlm_backend_ok")
