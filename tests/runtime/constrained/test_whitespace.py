"""Bounded JSON whitespace: a whitespace-greedy sampler still finishes; with free whitespace it loops."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from radixlm.runtime.constrained import GrammarBackend, GrammarMatcher
from tests.runtime.constrained.driver import drive_random

SCHEMA = json.dumps({"type": "object", "properties": {
    "ok": {"type": "boolean"}, "n": {"type": "array", "items": {"type": "integer"}, "maxItems": 3},
    "inner": {"type": "object", "properties": {"c": {"enum": ["x", "y"]}}, "required": ["c"]}},
    "required": ["ok", "n", "inner"]})


def _greedy_whitespace(pattern, tokenizer, seed):
    be = GrammarBackend(tokenizer, [tokenizer.eos_token_id], vocab_size=49152, whitespace_pattern=pattern)
    whitespace = np.array([bool(b) and b.isspace() for b in be.vocab.token_bytes])
    matcher = GrammarMatcher(be.submit("json", SCHEMA).result())
    tokens = drive_random(matcher, be.new_bitmask(1), np.random.default_rng(seed), whitespace,
                          max_tokens=200, prefer=whitespace)
    be.shutdown()
    return matcher.is_terminated(), be.vocab.decode(tokens).decode()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bounded_whitespace_never_runs_long(smollm2_tokenizer, seed):
    finished, text = _greedy_whitespace(None, smollm2_tokenizer, seed)
    assert finished, text
    assert max((len(m) for m in re.findall(r"\s+", text)), default=0) <= 2, repr(text)
    json.loads(text)


def test_free_whitespace_lets_a_whitespace_loving_sampler_loop(smollm2_tokenizer):
    finished, text = _greedy_whitespace("free", smollm2_tokenizer, 0)
    assert not finished and max(len(m) for m in re.findall(r"\s+", text)) > 50
