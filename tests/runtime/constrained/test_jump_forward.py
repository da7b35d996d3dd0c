"""Forced continuations and exact re-tokenization for jump-forward."""

from __future__ import annotations

import json

import numpy as np
import pytest

from radixlm.runtime.constrained import GrammarBackend, jump_forward
from radixlm.runtime.constrained.backend import BACKENDS
from tests.runtime.constrained.cases import SCHEMA_CASES
from tests.runtime.constrained.driver import closing_tokens, drive_random

COMPACT = json.dumps(
    {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    }
)


@pytest.fixture(scope="module", params=BACKENDS)
def compact_backend(smollm2_tokenizer, request):
    be = GrammarBackend(
        smollm2_tokenizer, [2], vocab_size=49152, whitespace_pattern="", backend=request.param
    )
    yield be
    be.shutdown()


def _accept_text(matcher, tokenizer, text):
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert all(matcher.accept_token(t) for t in ids)
    return ids


def test_forced_continuation_on_compact_schema(compact_backend, smollm2_tokenizer):
    matcher = (compact_backend.submit("json", COMPACT).result()).new_matcher()
    assert matcher.forced_continuation() == '{"name":"'
    _accept_text(matcher, smollm2_tokenizer, '{"name":"Ada')
    assert matcher.forced_continuation() == ""
    _accept_text(matcher, smollm2_tokenizer, '"')
    assert matcher.forced_continuation() == ',"age":'


def test_forced_continuation_choices_and_partial_utf8(compact_backend):
    matcher = (compact_backend.submit("choices", json.dumps(["naïve", "nope"])).result()).new_matcher()
    assert matcher.forced_continuation() == "n"
    vocab = compact_backend.vocab
    assert matcher.accept_token(vocab.outlines.get(b"na")[0])
    assert matcher.forced_continuation() == "ïve"


def test_jump_forward_retokenizes_exactly(compact_backend, smollm2_tokenizer):
    matcher = (compact_backend.submit("json", COMPACT).result()).new_matcher()
    output = _accept_text(matcher, smollm2_tokenizer, '{"name":"Ada Lovelace"')
    forced = matcher.forced_continuation()
    jf = jump_forward(matcher, output, smollm2_tokenizer, forced)
    assert jf is not None and jf.keep_len <= len(output)
    vocab = compact_backend.vocab
    assert vocab.decode(output[: jf.keep_len] + jf.token_ids) == vocab.decode(output) + forced.encode()
    assert jf.matcher.token_ids == output[: jf.keep_len] + jf.token_ids
    assert matcher.token_ids == output, "the input matcher is not modified"
    assert jf.matcher.forced_continuation() == ""
    assert jf.matcher.accept_token(smollm2_tokenizer.encode("36", add_special_tokens=False)[0])


@pytest.mark.parametrize("name", ["person", "tool_call", "nested_object", "array_of_objects", "refs"])
def test_jump_forward_during_random_generation(compact_backend, smollm2_tokenizer, name):
    """Alternate random tokens with jump-forwards; every jump is exact and the final JSON stays valid."""
    grammar = compact_backend.submit("json", json.dumps(dict(SCHEMA_CASES)[name])).result()
    matcher = grammar.new_matcher()
    closing = closing_tokens(compact_backend.vocab.token_bytes)
    rng = np.random.default_rng(3)
    output: list[int] = []
    jumps = 0
    vocab = compact_backend.vocab
    for _ in range(60):
        forced = matcher.forced_continuation()
        if forced:
            jf = jump_forward(matcher, output, smollm2_tokenizer, forced)
            assert jf is not None, (forced, vocab.decode(output))
            expected = vocab.decode(output) + forced.encode()
            assert vocab.decode(output[: jf.keep_len] + jf.token_ids) == expected
            output = output[: jf.keep_len] + jf.token_ids
            matcher = jf.matcher
            jumps += 1
        if matcher.is_terminated():
            break
        output += drive_random(matcher, compact_backend.new_bitmask(1), rng, closing, max_tokens=1)
        if matcher.is_terminated():
            break
    assert jumps >= 1
    if matcher.is_terminated():
        json.loads(vocab.decode(output))
