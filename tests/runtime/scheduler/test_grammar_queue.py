"""Grammar compilation runs off the loop; a compile past its deadline fails only its request."""

from __future__ import annotations

import concurrent.futures
import json

import pytest

from tests.helpers.engines import make_engine

SCHEMA = json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})


@pytest.fixture(scope="module")
def impatient_engine(tiny_llama_dir):
    engine = make_engine(tiny_llama_dir, grammar_compile_timeout=0.2)
    yield engine
    engine.shutdown()


def test_compile_timeout_fails_only_that_request(impatient_engine, monkeypatch):
    backend = impatient_engine.scheduler.grammars._get_backend()
    # Fault injection: a compile that never finishes (as a pathological schema would).
    monkeypatch.setattr(backend, "submit", lambda kind, text: concurrent.futures.Future())
    with pytest.raises(ValueError, match="timed out after 0.2 s"):
        impatient_engine.generate("json please", {"json_schema": SCHEMA, "max_new_tokens": 8})
    out = impatient_engine.generate(
        "still serving", {"temperature": 0, "max_new_tokens": 4, "ignore_eos": True}
    )
    assert out["meta_info"]["completion_tokens"] == 4


def test_compiles_in_time_are_served(impatient_engine):
    out = impatient_engine.generate("json please", {"json_schema": SCHEMA, "max_new_tokens": 16})
    assert out["meta_info"]["finish_reason"]["type"] in ("stop", "length")
