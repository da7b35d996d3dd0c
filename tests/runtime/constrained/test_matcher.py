"""Both backends' matchers driven by random allowed tokens: every finished output is in the language."""

from __future__ import annotations

import json
import re

import jsonschema
import numpy as np
import pytest

from radixlm.runtime.constrained import GrammarBackend
from radixlm.runtime.constrained.backend import BACKENDS
from tests.runtime.constrained.cases import REGEX_CASES, SCHEMA_CASES
from tests.runtime.constrained.driver import allowed_ids, closing_tokens, drive_random

SEEDS = (0, 1, 2)


@pytest.fixture(scope="module", params=BACKENDS)
def backend(smollm2_tokenizer, request):
    be = GrammarBackend(
        smollm2_tokenizer,
        [smollm2_tokenizer.eos_token_id],
        vocab_size=49152 + 64,
        max_concurrent=2,
        backend=request.param,
    )
    yield be
    be.shutdown()


@pytest.fixture(scope="module")
def closing(backend):
    return closing_tokens(backend.vocab.token_bytes)


def _run_cases(backend, closing, kind, cases, check):
    futures = {name: backend.submit(kind, text) for name, text in cases}
    finished = 0
    for name, _ in cases:
        grammar = futures[name].result()
        for seed in SEEDS:
            matcher = grammar.new_matcher()
            tokens = drive_random(matcher, backend.new_bitmask(1), np.random.default_rng(seed), closing)
            if matcher.is_terminated():
                finished += 1
                text = backend.vocab.decode(tokens).decode("utf-8")
                check(name, text)
    return finished


def test_random_regex_outputs_fullmatch(backend, closing):
    patterns = dict(REGEX_CASES)

    def check(name: str, text: str) -> None:
        assert re.fullmatch(patterns[name], text), (name, text)

    finished = _run_cases(backend, closing, "regex", REGEX_CASES, check)
    assert finished >= 0.8 * len(REGEX_CASES) * len(SEEDS), finished


def test_random_json_outputs_validate(backend, closing):
    schemas = dict(SCHEMA_CASES)

    def check(name: str, text: str) -> None:
        jsonschema.validate(json.loads(text), schemas[name])

    cases = [(name, json.dumps(schema)) for name, schema in SCHEMA_CASES]
    finished = _run_cases(backend, closing, "json", cases, check)
    assert finished >= 0.8 * len(SCHEMA_CASES) * len(SEEDS), finished


def test_eos_only_where_grammar_may_end_and_never_past_tokenizer(backend):
    matcher = (backend.submit("regex", "[0-9]{2}").result()).new_matcher()
    bitmask = backend.new_bitmask(2)
    eos = backend.eos_token_ids[0]
    matcher.fill_bitmask(bitmask, 1)
    assert eos not in allowed_ids(bitmask, 1)
    for ch in "42":
        assert matcher.accept_token(backend.vocab.outlines.get(ch.encode())[0])
    assert matcher.is_terminated()
    matcher.fill_bitmask(bitmask, 1)
    assert allowed_ids(bitmask, 1).tolist() == [eos]
    assert not bitmask[0].any(), "other rows untouched"
    assert matcher.accept_token(eos) and not matcher.accept_token(eos)


def test_tokens_past_tokenizer_vocab_never_allowed(backend):
    matcher = (backend.submit("regex", ".{0,5}").result()).new_matcher()
    bitmask = backend.new_bitmask(1).fill_(-1)
    matcher.fill_bitmask(bitmask, 0)
    ids = allowed_ids(bitmask, 0)
    assert ids.max() < backend.vocab.size and len(ids) > 10000
    assert not matcher.accept_token(backend.vocab.size + 3)


def test_rejects_disallowed_token_and_keeps_state(backend):
    matcher = (backend.submit("choices", '["yes", "no"]').result()).new_matcher()
    x = backend.vocab.outlines.get(b"x")[0]
    assert not matcher.accept_token(x)
    assert matcher.forced_continuation() == ""
    assert matcher.accept_token(backend.vocab.outlines.get(b"y")[0])
    assert matcher.forced_continuation() == "es"


def test_copy_and_rollback(backend, closing):
    grammar = backend.submit("json", json.dumps(dict(SCHEMA_CASES)["person"])).result()
    matcher = grammar.new_matcher()
    tokens = drive_random(matcher, backend.new_bitmask(1), np.random.default_rng(7), closing, max_tokens=20)
    twin = matcher.copy()
    a, b = backend.new_bitmask(1), backend.new_bitmask(1)
    matcher.fill_bitmask(a, 0)
    twin.fill_bitmask(b, 0)
    assert bool((a == b).all()) and twin.token_ids == tokens
    twin.rollback(3)
    replay = grammar.new_matcher()
    for t in tokens[:-3]:
        assert replay.accept_token(t)
    twin.fill_bitmask(a, 0)
    replay.fill_bitmask(b, 0)
    assert bool((a == b).all()) and twin.forced_continuation() == replay.forced_continuation()
    assert matcher.token_ids == tokens, "the original is unaffected"


@pytest.mark.parametrize("engine", BACKENDS)
def test_extra_eos_ids_follow_the_primary(smollm2_tokenizer, engine):
    be = GrammarBackend(smollm2_tokenizer, [2, 0], vocab_size=49152, backend=engine)
    matcher = (be.submit("regex", "a").result()).new_matcher()
    bitmask = be.new_bitmask(1)
    matcher.fill_bitmask(bitmask, 0)
    assert 0 not in allowed_ids(bitmask, 0)
    assert matcher.accept_token(be.vocab.outlines.get(b"a")[0])
    matcher.fill_bitmask(bitmask, 0)
    assert allowed_ids(bitmask, 0).tolist() == [0, 2]
    assert matcher.accept_token(0) and matcher.is_terminated()
    be.shutdown()
