"""What a hostile grammar can do to the process that holds the scheduler (issue 27, classes 1 and 3):
grammars whose structure the client writes are checked in a worker process first, so a native stack
overflow kills only the worker; outlines-core's regex checks run in the worker under the compile's
deadline and memory cap, not inline on arrival. The backend is driven directly here, past the limits
at the door (``request_limits``), as if those let a grammar through."""

from __future__ import annotations

import json
import os

import pytest

from radixlm.runtime.constrained import GrammarBackend
from tests.helpers.tokenizers import tiny_byte_level_tokenizer


@pytest.fixture(scope="module", params=["llguidance", "outlines"])
def backend(request):
    tok = tiny_byte_level_tokenizer()
    be = GrammarBackend(tok, [tok.eos_token_id], vocab_size=len(tok) + 5, backend=request.param)
    yield be
    be.shutdown()


def _lark_chain(n: int) -> str:
    return "start: r0\n" + "".join(f'r{i}: r{i + 1} "x"\n' for i in range(n)) + f'r{n}: "y"\n'


def _tag(grammar_depth: int) -> str:
    schema: dict = {"type": "integer"}
    for _ in range(grammar_depth):
        schema = {"type": "array", "items": schema}
    return json.dumps({"structures": [{"begin": "<f>", "schema": schema, "end": "</f>"}], "triggers": ["<f"]})


@pytest.mark.parametrize(
    "grammar",
    [_lark_chain(4000), _lark_chain(8000).replace('"x"\n', '"x" | "z"\n')],
    ids=["chain", "chain-with-alternatives"],
)
def test_a_grammar_that_overflows_the_native_stack_fails_only_its_request(backend, grammar):
    backend.validate("ebnf", grammar)  # nothing is built on arrival: the worker converts and checks it
    with pytest.raises(ValueError, match="crashed its compile worker"):
        backend.submit("ebnf", grammar).result(timeout=120)
    # this process (the scheduler's) is alive, and the next grammar compiles
    assert backend.submit("ebnf", 'root ::= "ok"').result(timeout=60).new_matcher() is not None
    assert os.getpid() > 0


def test_structural_tags_are_checked_in_the_worker_too(backend):
    compiled = backend.submit("structural_tag", _tag(3)).result(timeout=60)
    assert compiled.new_matcher() is not None
    bad = json.dumps({"structures": "nope"})
    backend.validate("structural_tag", bad)  # nothing built on arrival: the worker builds it
    with pytest.raises(ValueError, match="structural_tag"):
        backend.submit("structural_tag", bad).result(timeout=60)


@pytest.mark.parametrize("regex", ["ab(", "a{2,1}", "[z-a]", "(?P<x>a)(?P<x>b)"])
def test_regex_errors_arrive_from_the_worker_not_from_inline_validation(backend, regex):
    if backend.backend == "llguidance":
        pytest.skip("llguidance's regex check is its parser's, bounded and inline")
    backend.validate("regex", regex)  # nothing is compiled on arrival: not even a byte-level index
    with pytest.raises(ValueError, match="invalid regex"):
        backend.submit("regex", regex).result(timeout=60)


def test_a_regex_over_the_compile_deadline_is_stopped_in_the_worker():
    tok = tiny_byte_level_tokenizer()
    be = GrammarBackend(
        tok, [tok.eos_token_id], vocab_size=len(tok) + 5, backend="outlines", compile_timeout=0.5
    )
    try:
        # ~2.5 s to compile on a Zen 5 EPYC (200..260 took 0.49 s there: too close to the deadline)
        slow = "(" + "|".join(f"[a-z]{{{i}}}x" for i in range(200, 400)) + ")"
        be.validate("regex", slow)  # returns at once: the old inline check built the index here
        with pytest.raises(TimeoutError):
            be.submit("regex", slow).result(timeout=60)
        assert be.submit("dtype", "int").result(timeout=60) is not None
    finally:
        be.shutdown()


@pytest.mark.parametrize("engine", ["llguidance", "outlines"])
def test_the_grammar_cache_is_bounded_by_bytes_not_entries(engine):
    tok = tiny_byte_level_tokenizer()
    small = GrammarBackend(tok, [tok.eos_token_id], vocab_size=len(tok) + 5, backend=engine)
    sizes = {}
    try:
        for regex in ["[0-9]{3}", "(ab|cd){1,40}[a-z]{1,60}"]:
            sizes[regex] = small.submit("regex", regex).result(timeout=60).memory_bytes
    finally:
        small.shutdown()
    little, big = sorted(sizes, key=sizes.get)
    assert 0 < sizes[little] < sizes[big]
    budget = sizes[little] + sizes[big] - 1  # room for either, not both
    be = GrammarBackend(
        tok, [tok.eos_token_id], len(tok) + 5, cache_size=64, cache_bytes=budget, backend=engine
    )
    try:
        first = be.submit("regex", little)
        first.result(timeout=60)
        be.submit("regex", big).result(timeout=60)
        assert be.cached_bytes <= budget
        assert be.submit("regex", little) is not first  # evicted although 62 entries were free
    finally:
        be.shutdown()
