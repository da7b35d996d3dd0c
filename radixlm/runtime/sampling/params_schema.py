"""The JSON schema of a ``sampling_params`` object, as ``SamplingParams.from_dict`` accepts it.

Numbers come from ``param_rules.NUMBER_RULES`` (what ``validate`` checks); every other field is
described here, and ``sampling_params_schema`` fails when a ``SamplingParams`` field has no
description, so a new parameter cannot be served without being documented. What a schema cannot say
(``min_new_tokens <= max_new_tokens``, one constraint at most, a regex that compiles) is a 400.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from radixlm.runtime.sampling.param_rules import (
    BOOLEAN_PARAMS,
    DTYPES,
    LOGIT_BIAS_KEY,
    LOGIT_BIAS_MAX,
    NUMBER_RULES,
)
from radixlm.runtime.sampling.sampling_params import SamplingParams

_NON_EMPTY = {"type": "string", "minLength": 1}
_TOKEN_ID = {"type": "integer", "minimum": 0}
_JSON_TEXT_OR_OBJECT = {"type": ["string", "object"]}  # an object is serialized


def _one_or_list(item: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [item, {"type": "array", "items": item}, {"type": "null"}]}


_OTHER_FIELDS: dict[str, dict[str, Any]] = {
    "stop": _one_or_list(_NON_EMPTY),
    "stop_regex": _one_or_list(_NON_EMPTY),
    "stop_token_ids": _one_or_list(_TOKEN_ID),
    "seed": {"type": ["integer", "null"], "minimum": -(2**63), "maximum": 2**64 - 1},
    "regex": {"type": ["string", "null"]},
    "json_schema": {"anyOf": [_JSON_TEXT_OR_OBJECT, {"type": "null"}]},
    "structural_tag": {"anyOf": [_JSON_TEXT_OR_OBJECT, {"type": "null"}]},
    "choices": {"anyOf": [{"type": "array", "items": {"type": "string"}, "minItems": 1}, {"type": "null"}]},
    "dtype": {"enum": [*DTYPES, None]},
    "ebnf": {"type": ["string", "null"]},
    "custom_logit_processor": {"type": ["string", "null"]},
    "custom_params": {"type": ["object", "null"]},
    "logit_bias": {
        "anyOf": [
            {
                "type": "object",
                "propertyNames": {"pattern": f"^{LOGIT_BIAS_KEY.pattern}$"},
                "additionalProperties": {
                    "type": "number",
                    "minimum": -LOGIT_BIAS_MAX,
                    "maximum": LOGIT_BIAS_MAX,
                },
            },
            {"type": "null"},
        ]
    },
}


def sampling_params_schema() -> dict[str, Any]:
    """The object schema (no unknown keys); raises ``KeyError`` for an undescribed field."""
    properties: dict[str, Any] = {}
    for f in dataclasses.fields(SamplingParams):
        if f.name in NUMBER_RULES:
            schema = NUMBER_RULES[f.name].json_schema()
        elif f.name in BOOLEAN_PARAMS:
            schema = {"type": "boolean"}
        else:
            schema = dict(_OTHER_FIELDS[f.name])
        if f.default is not dataclasses.MISSING and f.default is not None:
            schema["default"] = f.default
        properties[f.name] = schema
    return {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
        "description": "Sampling parameters; a constraint (regex, json_schema, choices, dtype, ebnf, "
        "structural_tag) at most one of them.",
    }
