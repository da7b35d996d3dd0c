"""``stop_regex`` (stop where a regular expression matches the output, cut like a stop string) and
``logit_bias`` (token id -> bias added to the logits) on the tiny random model."""

from __future__ import annotations

import re

import pytest

FREE = {"temperature": 1.0, "seed": 11, "max_new_tokens": 24, "ignore_eos": True}  # seeded: reproducible


def _printable_piece(text: str) -> tuple[int, str]:
    """A 2-character piece of ``text`` made of ordinary characters, at its first occurrence."""
    for i in range(4, len(text) - 2):
        piece = text[i : i + 2]
        if piece.isprintable() and piece.isascii() and text.find(piece) == i:
            return i, piece
    raise AssertionError(f"no usable piece in {text!r}")


def test_stop_regex_cuts_the_output_at_the_first_match(tiny_engine):
    full = tiny_engine.generate("Once upon a time", FREE)["text"]
    pos, piece = _printable_piece(full)
    out = tiny_engine.generate("Once upon a time", {**FREE, "stop_regex": re.escape(piece)})
    assert out["text"] == full[:pos]
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": piece}
    kept = tiny_engine.generate(
        "Once upon a time", {**FREE, "stop_regex": [re.escape(piece)], "no_stop_trim": True}
    )
    assert kept["text"].startswith(full[: pos + 2])


def test_stop_regex_that_never_matches_runs_to_the_length_limit(tiny_engine):
    out = tiny_engine.generate("Once upon a time", {**FREE, "stop_regex": r"NEVER\d{9}HERE"})
    assert out["meta_info"]["finish_reason"]["type"] == "length"


@pytest.mark.parametrize("bad, why", [("(", "missing"), ("a*", "empty string"), ([""], "non-empty")])
def test_bad_stop_regex_is_rejected(tiny_engine, bad, why):
    with pytest.raises(ValueError, match=f"stop_regex.*{why}|{why}"):
        tiny_engine.generate("x", {"stop_regex": bad})


def test_logit_bias_moves_the_greedy_choice(tiny_engine):
    base = tiny_engine.generate("abc", {"temperature": 0, "max_new_tokens": 4, "ignore_eos": True})
    first = base["output_ids"][0]
    target = 100 if first != 100 else 101
    pushed = tiny_engine.generate(
        "abc", {"temperature": 0, "max_new_tokens": 4, "ignore_eos": True, "logit_bias": {str(target): 100}}
    )
    assert pushed["output_ids"] == [target] * 4
    banned = tiny_engine.generate(
        "abc", {"temperature": 0, "max_new_tokens": 1, "ignore_eos": True, "logit_bias": {first: -100}}
    )
    assert banned["output_ids"][0] != first


@pytest.mark.parametrize(
    "bias, why",
    [
        ({"999999": 1}, "outside the vocabulary"),
        ({"5": 1000}, r"\[-100, 100\]"),
        ({"x": 1}, "not a token id"),
    ],
)
def test_bad_logit_bias_is_rejected(tiny_engine, bias, why):
    with pytest.raises(ValueError, match=why):
        tiny_engine.generate("x", {"logit_bias": bias})
