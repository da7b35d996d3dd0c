"""Bounded JSON whitespace: a whitespace-greedy sampler still finishes; with free whitespace it loops."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from radixlm.runtime.constrained import GrammarBackend
from radixlm.runtime.constrained.backend import BACKENDS
from tests.runtime.constrained.driver import drive_random

# additionalProperties false: llguidance follows JSON Schema and allows extra keys otherwise (free
# strings, where whitespace is content, not the separators this flag bounds); outlines never allows them.
SCHEMA = json.dumps(
    {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "ok": {"type": "boolean"},
            "n": {"type": "array", "items": {"type": "integer"}, "maxItems": 3},
            "inner": {
                "type": "object",
                "properties": {"c": {"enum": ["x", "y"]}},
                "required": ["c"],
                "additionalProperties": False,
            },
        },
        "required": ["ok", "n", "inner"],
    }
)


def _greedy_whitespace(pattern, tokenizer, seed, engine):
    be = GrammarBackend(
        tokenizer, [tokenizer.eos_token_id], vocab_size=49152, whitespace_pattern=pattern, backend=engine
    )
    whitespace = np.array([bool(b) and b.isspace() for b in be.vocab.token_bytes])
    matcher = (be.submit("json", SCHEMA).result()).new_matcher()
    tokens = drive_random(
        matcher, be.new_bitmask(1), np.random.default_rng(seed), whitespace, max_tokens=200, prefer=whitespace
    )
    be.shutdown()
    return matcher.is_terminated(), be.vocab.decode(tokens).decode()


@pytest.mark.parametrize("engine", BACKENDS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bounded_whitespace_never_runs_long(smollm2_tokenizer, seed, engine):
    finished, text = _greedy_whitespace(None, smollm2_tokenizer, seed, engine)
    assert finished, text
    assert max((len(m) for m in re.findall(r"\s+", text)), default=0) <= 2, repr(text)
    json.loads(text)


@pytest.mark.parametrize("engine", BACKENDS)
def test_free_whitespace_lets_a_whitespace_loving_sampler_loop(smollm2_tokenizer, engine):
    finished, text = _greedy_whitespace("free", smollm2_tokenizer, 0, engine)
    assert not finished and max(len(m) for m in re.findall(r"\s+", text)) > 50
