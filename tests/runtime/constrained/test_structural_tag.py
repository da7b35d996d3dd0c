"""Triggered grammars (structural_tag) and ebnf through llguidance, driven token by token."""

from __future__ import annotations

import json
import re

import jsonschema
import numpy as np
import pytest

from radixlm.runtime.constrained import GrammarBackend
from radixlm.runtime.constrained.llguidance.structural_tag import structural_tag_grammar
from tests.runtime.constrained.driver import allowed_ids, closing_tokens, drive_random

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
TAG = {
    "type": "structural_tag",
    "structures": [
        {"begin": "<tool_call>weather", "schema": WEATHER, "end": "</tool_call>"},
        {"begin": "<tool_call>time", "schema": {"type": "object"}, "end": "</tool_call>"},
    ],
    "triggers": ["<tool_call>"],
}
REGION = re.compile(r"<tool_call>weather(.*?)</tool_call>", re.S)


@pytest.fixture(scope="module")
def backend(smollm2_tokenizer):
    be = GrammarBackend(smollm2_tokenizer, [smollm2_tokenizer.eos_token_id], vocab_size=49152)
    yield be
    be.shutdown()


def _accept_text(matcher, tokenizer, text: str) -> None:
    for t in tokenizer.encode(text, add_special_tokens=False):
        assert matcher.accept_token(t), text


def test_free_text_until_the_trigger_then_the_schema(backend, smollm2_tokenizer):
    matcher = backend.submit("structural_tag", json.dumps(TAG)).result(timeout=60).new_matcher()
    bitmask = backend.new_bitmask(1)
    matcher.fill_bitmask(bitmask, 0)
    assert len(allowed_ids(bitmask, 0)) > 40_000, "before a trigger the text is free"
    _accept_text(matcher, smollm2_tokenizer, "Let me check. ")
    assert smollm2_tokenizer.eos_token_id in allowed_ids(bitmask, 0)
    _accept_text(matcher, smollm2_tokenizer, "<tool_call>")
    assert matcher.forced_continuation() == "", "two structures share the trigger"
    _accept_text(matcher, smollm2_tokenizer, "weather")
    matcher.fill_bitmask(bitmask, 0)
    allowed = {backend.vocab.token_bytes[t] for t in allowed_ids(bitmask, 0) if t < backend.vocab.size}
    assert all(b.lstrip().startswith(b"{") or b.isspace() for b in allowed), "inside the region: the schema"
    assert smollm2_tokenizer.eos_token_id not in allowed_ids(bitmask, 0), "a region must be finished"
    bad = smollm2_tokenizer.encode(" hello", add_special_tokens=False)[0]
    assert not matcher.accept_token(bad)


@pytest.mark.parametrize("seed", range(4))
def test_random_regions_validate_and_close(backend, smollm2_tokenizer, seed):
    matcher = backend.submit("structural_tag", json.dumps(TAG)).result(timeout=60).new_matcher()
    _accept_text(matcher, smollm2_tokenizer, "Calling: <tool_call>weather")
    closing = closing_tokens(backend.vocab.token_bytes)
    rng = np.random.default_rng(seed)
    tokens = drive_random(matcher, backend.new_bitmask(1), rng, closing, max_tokens=80)
    text = "Calling: <tool_call>weather" + backend.vocab.decode(tokens).decode("utf-8", errors="replace")
    region = REGION.search(text)
    if region is not None:  # the region closed: its JSON follows the schema, and free text resumes
        jsonschema.validate(json.loads(region.group(1)), WEATHER)
        bitmask = backend.new_bitmask(1)
        if not matcher.is_terminated():
            matcher.fill_bitmask(bitmask, 0)
            assert smollm2_tokenizer.eos_token_id in allowed_ids(bitmask, 0)


@pytest.mark.parametrize(
    "spec, field",
    [
        ({"structures": [], "triggers": ["<f"]}, "structures"),
        ({"structures": [{"begin": "<f>", "schema": {}, "end": "</f>"}], "triggers": []}, "triggers"),
        ({"structures": [{"begin": "<g>", "schema": {}, "end": "</g>"}], "triggers": ["<f"]}, r"begin"),
        ({"structures": [{"begin": "<f>", "schema": 3, "end": "</f>"}], "triggers": ["<f"]}, r"schema"),
        ({"structures": [{"begin": "<f>", "end": 1}], "triggers": ["<f"]}, r"end"),
        ({"structures": [], "triggers": ["<f"], "extra": 1}, "extra"),
    ],
)
def test_bad_structural_tag_names_the_field(spec, field):
    with pytest.raises(ValueError, match=field):
        structural_tag_grammar(json.dumps(spec))


def test_ebnf_gbnf_and_lark(backend, smollm2_tokenizer):
    for grammar in ('root ::= "yes" | "no" | "maybe " [0-9]', 'start: "yes" | "no" | "maybe " /[0-9]/'):
        matcher = backend.submit("ebnf", grammar).result(timeout=60).new_matcher()
        _accept_text(matcher, smollm2_tokenizer, "maybe 7")
        assert matcher.is_terminated() or matcher.accept_token(smollm2_tokenizer.eos_token_id)
        other = backend.submit("ebnf", grammar).result(timeout=60).new_matcher()
        assert not other.accept_token(smollm2_tokenizer.encode("hello", add_special_tokens=False)[0])
    with pytest.raises(ValueError, match="ebnf"):
        backend.submit("ebnf", 'root ::= "a" undefined_rule').result(timeout=60)
