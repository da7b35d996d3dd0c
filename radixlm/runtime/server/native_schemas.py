"""JSON schemas of the native API's request bodies, for the OpenAPI document (``openapi_doc.py``).

Built from the definitions the parsers check against: the field sets of ``native_protocol``, the
sampling parameters' schema (``sampling/params_schema.py``), the graph format of
``program/graph_check.py``, the session keys of ``sessions.py`` and the reasoning parser names. What
a schema cannot express (lengths that must match the number of prompts, token ids inside the
vocabulary, a prompt that fits the context) is answered with a 400 naming the field.
"""

from __future__ import annotations

from typing import Any

from radixlm.program.choices import METHODS
from radixlm.program.graph_check import GRAPH_VERSION, OP_TYPES
from radixlm.program.reasoning import REASONING_PARSERS
from radixlm.runtime.server.native_protocol import FIELDS, PER_ITEM_FIELDS, PROMPT_FIELDS, UNSUPPORTED_IF_SET

SAMPLING_PARAMS_REF = {"$ref": "#/components/schemas/SamplingParams"}
_NULL = {"type": "null"}
TOKEN_ID_REF = {"$ref": "#/components/schemas/TokenId"}  # in the model's vocabulary (openapi_doc)
_TOKEN_IDS = {"type": "array", "items": TOKEN_ID_REF}
_SEGMENT = {
    "oneOf": [
        {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {"ids": _TOKEN_IDS},
            "required": ["ids"],
            "additionalProperties": False,
        },
    ]
}
_SEGMENTS = {"type": "array", "items": _SEGMENT, "minItems": 1}


def _per_prompt(one: dict[str, Any]) -> dict[str, Any]:
    """A per-prompt field: one value for all prompts, a list with one per prompt, or null."""
    return {"anyOf": [one, {"type": "array", "items": {"anyOf": [one, _NULL]}}, _NULL]}


_PROMPTS = {
    "text": {
        "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}, _NULL]
    },
    "input_ids": {"anyOf": [_TOKEN_IDS, {"type": "array", "items": _TOKEN_IDS, "minItems": 1}, _NULL]},
    "input_segments": {"anyOf": [_SEGMENTS, {"type": "array", "items": _SEGMENTS, "minItems": 1}, _NULL]},
}
_PER_ITEM = {
    "sampling_params": SAMPLING_PARAMS_REF,
    "rid": {"type": "string"},
    "return_logprob": {"type": "boolean"},
    "logprob_start_len": {"type": "integer", "minimum": -1},
    "top_logprobs_num": {"type": "integer", "minimum": 0},
    "pin_children": {"type": "integer", "minimum": 0},
    "custom_logit_processor": {"type": "string", "description": "with --enable-custom-logit-processor"},
    "lora_path": {"type": "string", "description": "a loaded LoRA adapter's name (null: the base model)"},
}
SESSION_PARAMS_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "rid": {"type": ["string", "null"]},
        "offset": {"type": ["integer", "null"], "minimum": 0},
        "replace": {"type": ["boolean", "null"]},
        "drop_previous_output": {"type": ["boolean", "null"]},
    },
    "required": ["id"],
    "additionalProperties": False,
}
_OTHER = {
    "stream": {"type": ["boolean", "null"]},
    "return_text_in_logprobs": _per_prompt({"type": "boolean"}),
    "unpin_rids": {
        "anyOf": [
            {
                "type": "array",
                "items": {
                    "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}, _NULL]
                },
            },
            _NULL,
        ]
    },
    "session_params": {"anyOf": [{"$ref": "#/components/schemas/SessionParams"}, _NULL]},
    "priority": {"type": ["integer", "null"]},
    # per prompt an image (data URL, base64, path or URL) or a list of them (vision-language models)
    "image_data": {
        "anyOf": [
            {"type": "string"},
            {
                "type": "array",
                "items": {
                    "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}, _NULL]
                },
            },
            _NULL,
        ]
    },
}
_UNSET = {
    "anyOf": [
        _NULL,
        {"const": False},
        {"const": ""},
        {"type": "array", "maxItems": 0},
        {"type": "object", "maxProperties": 0},
    ],
    "description": "not supported by this server: accepted only when unset",
}


def generate_schema() -> dict[str, Any]:
    """``POST /generate``: exactly one of the prompt fields, no unknown fields."""
    properties: dict[str, Any] = {}
    for name in sorted(FIELDS):
        if name in PROMPT_FIELDS:
            properties[name] = _PROMPTS[name]
        elif name in PER_ITEM_FIELDS:
            properties[name] = _per_prompt(_PER_ITEM[name])
        else:
            properties[name] = _OTHER[name]
    properties.update({name: _UNSET for name in sorted(UNSUPPORTED_IF_SET)})
    exactly_one = [{"required": [name], "properties": {name: {"not": _NULL}}} for name in PROMPT_FIELDS]
    return {"type": "object", "properties": properties, "additionalProperties": False, "oneOf": exactly_one}


def program_schema(max_nodes: int) -> dict[str, Any]:
    """``POST /program``: ``{"graph": ...}`` in the format ``graph_check`` enforces."""
    var = {
        "type": "object",
        "required": ["var", "node"],
        "additionalProperties": False,
        "properties": {"var": {"type": "string"}, "node": {"type": "integer", "minimum": 0}},
    }
    op = {
        "anyOf": [
            _NULL,
            {
                "type": "object",
                "required": ["type"],
                "properties": {
                    "type": {"enum": list(OP_TYPES)},
                    "name": {"type": ["string", "null"]},
                    "options": {"type": "object"},
                    "method": {"enum": list(METHODS)},
                    "choices": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                },
            },
        ]
    }
    node = {
        "type": "object",
        "required": ["id", "extend"],
        "properties": {
            "id": {"type": "integer", "minimum": 0, "description": "its index in nodes"},
            "state": {"type": "integer"},
            "parent": {"type": ["integer", "null"], "minimum": 0},
            "extend": {"type": "array", "items": {"anyOf": [*_SEGMENT["oneOf"], var]}},
            "op": op,
        },
    }
    graph = {
        "type": "object",
        "required": ["version", "nodes"],
        "properties": {
            "version": {"const": GRAPH_VERSION},
            "nodes": {"type": "array", "items": node, "minItems": 1, "maxItems": max_nodes},
        },
    }
    return {"type": "object", "required": ["graph"], "properties": {"graph": graph}}


ABORT_SCHEMA = {
    "type": "object",
    "properties": {"rid": {"type": "string", "minLength": 1}, "abort_all": {"type": "boolean"}},
    "anyOf": [
        {"required": ["rid"]},
        {"required": ["abort_all"], "properties": {"abort_all": {"const": True}}},
    ],
}
_LORA_NAME = {"type": "string", "minLength": 1}
LOAD_LORA_SCHEMA = {
    "type": "object",
    "required": ["lora_name", "lora_path"],
    "properties": {
        "lora_name": _LORA_NAME,
        "lora_path": {**_LORA_NAME, "description": "a PEFT directory or GGUF LoRA file on the server"},
        "pinned": {"type": "boolean", "description": "SGLang's; accepted, adapters are never evicted here"},
    },
}
UNLOAD_LORA_SCHEMA = {"type": "object", "required": ["lora_name"], "properties": {"lora_name": _LORA_NAME}}
OPEN_SESSION_SCHEMA = {
    "type": "object",
    "properties": {
        "capacity_of_str_len": {"type": "integer", "minimum": 1},
        "session_id": {"type": ["string", "null"]},
    },
}
CLOSE_SESSION_SCHEMA = {
    "type": "object",
    "properties": {"session_id": {"type": "string"}},
    "required": ["session_id"],
}
SEPARATE_REASONING_SCHEMA = {
    "type": "object",
    "required": ["text"],
    "properties": {"text": {"type": "string"}, "reasoning_parser": {"enum": [*REASONING_PARSERS, None]}},
}
