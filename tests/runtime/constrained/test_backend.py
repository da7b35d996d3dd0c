"""GrammarBackend on both engines: validation errors, compile futures, the LRU cache."""

from __future__ import annotations

import json
import re

import pytest

from radixlm.runtime.constrained import GrammarBackend
from tests.helpers.tokenizers import tiny_byte_level_tokenizer


@pytest.fixture(scope="module", params=["llguidance", "outlines"])
def backend(request):
    tok = tiny_byte_level_tokenizer()
    be = GrammarBackend(tok, [tok.eos_token_id], vocab_size=len(tok) + 5, cache_size=2, backend=request.param)
    yield be
    be.shutdown()


def rejection(backend, kind: str, text: str) -> ValueError:
    """The ValueError a client gets: from ``validate`` (on arrival) or from the compile."""
    with pytest.raises(ValueError) as info:
        backend.validate(kind, text)
        backend.submit(kind, text).result(timeout=60)
    return info.value


@pytest.mark.parametrize(
    "kind,text,message",
    [
        ("regex", "ab(", "invalid regex"),
        ("regex", "a{2,1}", "invalid regex"),
        ("regex", "(?=a)b", "look-around"),
        ("regex", "(?<!a)b", "look-around"),
        ("regex", r"\bword", "word boundaries"),
        ("regex", "^abc$", "anchors"),
        ("json", "{not json", "not valid JSON"),
        ("json", '{"type": "foo"}', "unsupported json_schema"),
        (
            "json",
            '{"type": "integer", "minimum": 5, "maximum": 1}',
            {"outlines": "empty integer range", "llguidance": "minimum .5. is greater than maximum .1."},
        ),
        ("choices", "[]", "non-empty list"),
        ("dtype", "complex", "unsupported dtype"),
        ("grammar", "x", "unknown grammar kind"),
    ],
)
def test_rejects_with_clear_message(backend, kind, text, message):
    if isinstance(message, dict):
        message = message[backend.backend]
    assert re.search(message, str(rejection(backend, kind, text)))


def test_unsupported_keyword_is_named(backend):
    message = str(rejection(backend, "json", json.dumps({"not": {"type": "string"}})))
    assert "unsupported json_schema" in message and "not" in message


@pytest.mark.parametrize(
    "kind,text",
    [
        ("regex", r"[a-z]+\d"),
        ("json", '{"type": "string"}'),
        ("choices", '["a", "b"]'),
        ("dtype", "float"),
        ("json_object", ""),
    ],
)
def test_validate_accepts(backend, kind, text):
    backend.validate(kind, text)


def test_second_submit_returns_the_cached_compile(backend):
    first = backend.submit("regex", "[0-9]{4}")
    grammar = first.result(timeout=30)
    second = backend.submit("regex", "[0-9]{4}")
    assert second is first and second.done()
    assert second.result() is grammar and grammar.compile_seconds > 0


def test_failed_compile_propagates_and_is_not_cached(backend):
    future = backend.submit("json", json.dumps({"type": "nope"}))
    with pytest.raises(ValueError, match="unsupported json_schema"):
        future.result(timeout=60)
    assert backend.submit("json", json.dumps({"type": "nope"})) is not future


def test_lru_evicts_oldest(backend):
    a = backend.submit("dtype", "int")
    backend.submit("dtype", "bool")
    backend.submit("dtype", "str")
    assert backend.submit("dtype", "int") is not a


@pytest.mark.parametrize(
    "kind,text",
    [
        ("ebnf", 'root ::= "yes" | "no"'),
        ("ebnf", 'start: "a"+ "b"'),
        (
            "structural_tag",
            json.dumps(
                {
                    "structures": [{"begin": "<f>", "schema": {"type": "integer"}, "end": "</f>"}],
                    "triggers": ["<f"],
                }
            ),
        ),
    ],
)
def test_llguidance_only_kinds_compile_on_either_backend(backend, kind, text):
    backend.validate(kind, text)
    grammar = backend.submit(kind, text).result(timeout=60)
    assert grammar.backend == "llguidance"


def test_bitmask_covers_logits_width(backend):
    assert backend.new_bitmask(3).shape == (3, (backend.vocab_size + 31) // 32)
