"""Byte vocabulary: every non-special token maps back to its exact bytes."""

from __future__ import annotations

from radixlm.runtime.constrained.vocabulary import build_vocabulary, get_vocabulary
from tests.helpers.tokenizers import tiny_byte_level_tokenizer, tiny_sentencepiece_tokenizer

TEXTS = ['{"name": "Ada", "n": [1, 2]}', "héllo wörld 日本語 🙂", "  two  spaces\nnewline\ttab"]


def test_smollm2_every_token_round_trips(smollm2_tokenizer):
    vocab = get_vocabulary(smollm2_tokenizer, 2)
    assert vocab.size == 49152 and vocab.eos_token_id == 2
    assert all(vocab.token_bytes[i] is None for i in range(17)), "special tokens excluded"
    for tid in range(17, vocab.size):
        decoded = smollm2_tokenizer.decode([tid])
        assert vocab.token_bytes[tid].decode("utf-8", "replace") == decoded, tid
    for text in TEXTS:
        ids = smollm2_tokenizer.encode(text, add_special_tokens=False)
        assert vocab.decode(ids) == text.encode()
    assert get_vocabulary(smollm2_tokenizer, 2) is vocab, "cached per tokenizer"


def test_byte_level_round_trip():
    tok = tiny_byte_level_tokenizer()
    vocab = build_vocabulary(tok, tok.eos_token_id)
    for text in TEXTS:
        assert vocab.decode(tok.encode(text, add_special_tokens=False)) == text.encode()
    assert vocab.token_bytes[tok.eos_token_id] is None


def test_sentencepiece_spaces_and_byte_fallback():
    tok = tiny_sentencepiece_tokenizer()
    vocab = build_vocabulary(tok, tok.eos_token_id)
    assert vocab.token_bytes[tok.convert_tokens_to_ids("<0x41>")] == b"A"
    assert vocab.token_bytes[tok.convert_tokens_to_ids("\u2581the")] == b" the"
    for text in TEXTS:
        assert vocab.decode(tok.encode(text, add_special_tokens=False)) == (" " + text).encode()


def test_limit_drops_ids_past_logits_width():
    tok = tiny_byte_level_tokenizer()
    vocab = build_vocabulary(tok, tok.eos_token_id, limit=100)
    assert vocab.size == 100
