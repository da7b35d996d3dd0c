"""Stricter rewrites of keywords llguidance lacks: every output still validates against the ORIGINAL."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

from radixlm.runtime.constrained import GrammarBackend
from radixlm.runtime.constrained.llguidance.schema_strengthen import strengthen
from tests.runtime.constrained.driver import closing_tokens, drive_random

OBJ = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string", "maxLength": 4}}}
SCHEMAS = {
    "unevaluated_properties": {
        **OBJ,
        "allOf": [{"properties": {"c": {"type": "boolean"}}}],
        "unevaluatedProperties": False,
    },
    "unevaluated_items": {"type": "array", "prefixItems": [{"type": "integer"}], "unevaluatedItems": False},
    "if_then_else": {"if": {"type": "integer"}, "then": {"minimum": 3}, "else": {"type": "string"}},
    "dependent_required": {**OBJ, "dependentRequired": {"a": ["b"]}},
    "dependent_schemas": {**OBJ, "dependentSchemas": {"a": {"required": ["b"]}}},
    "unique_items": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
    "contains": {"type": "array", "items": {"type": "integer"}, "contains": {"minimum": 5}, "minContains": 2},
    "unknown_format": {"type": "string", "format": "uri-template", "maxLength": 6},
}


@pytest.fixture(scope="module")
def backend(smollm2_tokenizer):
    be = GrammarBackend(smollm2_tokenizer, [smollm2_tokenizer.eos_token_id], vocab_size=49152)
    yield be
    be.shutdown()


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_outputs_validate_against_the_original(backend, name):
    schema = SCHEMAS[name]
    assert strengthen(schema) != schema
    grammar = backend.submit("json", json.dumps(schema)).result(timeout=60)
    closing = closing_tokens(backend.vocab.token_bytes)
    finished = 0
    for seed in range(6):
        matcher = grammar.new_matcher()
        tokens = drive_random(
            matcher, backend.new_bitmask(1), np.random.default_rng(seed), closing, max_tokens=60
        )
        if matcher.is_terminated():
            finished += 1
            jsonschema.Draft202012Validator(schema).validate(json.loads(backend.vocab.decode(tokens)))
    assert finished >= 2


def test_strengthen_is_recursive_and_leaves_data_alone():
    schema = {"properties": {"x": {"uniqueItems": True}}, "const": {"uniqueItems": True}}
    assert strengthen(schema) == {"properties": {"x": {"maxItems": 1}}, "const": {"uniqueItems": True}}
