"""IncrementalDetokenizer with the SmolLM2 byte-level BPE tokenizer: multi-byte text, stop strings."""

from __future__ import annotations

import random

import pytest

from radixlm.runtime.detokenizer.incremental import IncrementalDetokenizer

TEXTS = [
    "Hello, world! The capital of France is Paris.",
    "Emoji: 😀👍🏽🇫🇷 family 👨‍👩‍👧‍👦 done",
    "中文测试：你好，世界。日本語のテキスト、한국어 텍스트",
    "Mixed ünïcödé — “quotes” … and math ∑ x² ≤ ∞",
    "code:\n    def f(x):\n        return x ** 2  # 🐍\n",
    "🤖" * 7 + "end",
]


def stream(det: IncrementalDetokenizer, ids: list[int], chunks: list[int], finish_reason=None) -> list[str]:
    """Feed ``ids`` in chunks of the given sizes, then finish; return every delta."""
    deltas, pos = [], 0
    for size in chunks:
        deltas.append(det.feed(ids[pos : pos + size]))
        pos += size
        assert det.text == "".join(deltas)
    deltas.append(det.finish(finish_reason, ids[pos:]))
    return deltas


@pytest.mark.parametrize("text", TEXTS)
def test_one_token_at_a_time_matches_full_decode(tokenizer, text):
    ids = tokenizer.encode(text)
    det = IncrementalDetokenizer(tokenizer)
    deltas = stream(det, ids, [1] * len(ids))
    assert all("\ufffd" not in d for d in deltas)
    assert "".join(deltas) == det.text == tokenizer.decode(ids, skip_special_tokens=True) == text


def test_random_chunks_never_split_characters(tokenizer):
    rng = random.Random(0)
    for text in TEXTS:
        ids = tokenizer.encode(text)
        for _ in range(5):
            chunks, left = [], len(ids)
            while left:
                chunks.append(min(left, rng.randint(1, 4)))
                left -= chunks[-1]
            deltas = stream(IncrementalDetokenizer(tokenizer), ids, chunks[:-1])
            assert all("\ufffd" not in d for d in deltas)
            assert "".join(deltas) == text


def test_incomplete_character_is_held_then_flushed_at_finish(tokenizer):
    ids = tokenizer.encode("a😀")
    assert len(ids) > 2
    det = IncrementalDetokenizer(tokenizer)
    assert det.feed(ids[:1]) == "a"
    assert det.feed(ids[1:-1]) == ""  # the emoji's bytes are not complete yet
    # Finishing inside a character drops its incomplete bytes (the request ended there).
    assert det.finish({"type": "length", "length": len(ids) - 1}) == "" and det.text == "a"
    det = IncrementalDetokenizer(tokenizer)
    assert det.feed(ids[:-1]) == ""  # held while the chunk ends inside a character
    assert det.feed(ids[-1:]) == "a😀"


def test_special_tokens_skipped_or_kept(tokenizer):
    ids = tokenizer.encode("Hi") + [tokenizer.eos_token_id] + tokenizer.encode(" there")
    assert "".join(stream(IncrementalDetokenizer(tokenizer), ids, [1] * len(ids))) == "Hi there"
    kept = IncrementalDetokenizer(tokenizer, skip_special_tokens=False)
    assert "".join(stream(kept, ids, [1] * len(ids))) == "Hi<|im_end|> there"


@pytest.mark.parametrize("stop", ["Paris", "capital of", "😀 b", ".", "is P"])
def test_stop_string_cut_and_never_emitted(tokenizer, stop):
    text = "The capital of France is Paris. 😀 b and more"
    ids = tokenizer.encode(text)
    end = next(i for i in range(1, len(ids) + 1) if stop in tokenizer.decode(ids[:i]))
    det = IncrementalDetokenizer(tokenizer, stop_strings=[stop, "never-seen"])
    deltas = stream(det, ids[:end], [1] * (end - 1), {"type": "stop", "matched": stop})
    expected = text[: text.index(stop)]
    assert det.text == "".join(deltas) == expected
    for i in range(1, len(deltas)):  # a stop string, or any part of its match, never streams out
        assert stop not in "".join(deltas[:i])
        assert expected.startswith("".join(deltas[:i]))


def test_partial_stop_prefix_released_when_it_does_not_match(tokenizer):
    det = IncrementalDetokenizer(tokenizer, stop_strings=["Paris!"])
    ids = tokenizer.encode("Paris is big")
    emitted = "".join(det.feed([i]) for i in ids)
    assert emitted == "Paris is big"
    held = IncrementalDetokenizer(tokenizer, stop_strings=["big deal"])
    held_text = "".join(held.feed([i]) for i in ids)
    assert held_text == "Paris is "  # " big" may still become "big deal"
    assert held.finish({"type": "length", "length": len(ids)}) == "big"


def test_no_stop_trim_keeps_the_stop_string(tokenizer):
    ids = tokenizer.encode("one two three")
    det = IncrementalDetokenizer(tokenizer, stop_strings=["two"], no_stop_trim=True)
    deltas = stream(det, ids, [1] * (len(ids) - 1), {"type": "stop", "matched": "two"})
    assert "".join(deltas) == "one two three"


def test_matched_stop_token_id_left_out(tokenizer):
    ids = tokenizer.encode("Hello.")
    stop_id = ids[-1]
    det = IncrementalDetokenizer(tokenizer)
    deltas = stream(det, ids, [1] * (len(ids) - 1), {"type": "stop", "matched": stop_id})
    assert "".join(deltas) == "Hello"
    kept = IncrementalDetokenizer(tokenizer, no_stop_trim=True)
    assert "".join(stream(kept, ids, [1] * (len(ids) - 1), {"type": "stop", "matched": stop_id})) == "Hello."


def test_finish_is_idempotent_and_feed_after_finish_fails(tokenizer):
    det = IncrementalDetokenizer(tokenizer)
    det.feed(tokenizer.encode("abc"))
    assert det.finish() == ""
    assert det.finish() == "" and det.text == "abc" and det.finished
    with pytest.raises(RuntimeError):
        det.feed([1])
