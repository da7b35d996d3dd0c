"""The server's OpenAPI 3.1 document, served at ``GET /openapi.json`` (behind the front door).

The routes read their bodies themselves (``http_util.read_json``: bounded JSON, not FastAPI's
parser), so FastAPI sees no body parameters. The paths come from the app's routes; each body schema
comes from the definitions its parser validates with: the pydantic models of the OpenAI and Anthropic
APIs (which
parse in strict mode, so the schema's types are the accepted ones), ``native_schemas`` for the
native API, and ``sampling/params_schema.py`` for sampling parameters. The server's own limits
(``--max-n``, ``--max-stop-strings``, ``--max-program-nodes``) are written in as ranges.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from radixlm.runtime.requests.request_limits import MAX_STOP_CHARS
from radixlm.runtime.sampling.param_rules import NUMBER_RULES
from radixlm.runtime.sampling.params_schema import sampling_params_schema
from radixlm.runtime.server import native_schemas as native
from radixlm.runtime.server.anthropic_protocol import CountTokensRequest, MessagesRequest
from radixlm.runtime.server.embeddings_protocol import (
    ClassifyRequest,
    EmbeddingRequest,
    EncodeRequest,
    RerankRequest,
)
from radixlm.runtime.server.errors import ANTHROPIC_PATH
from radixlm.runtime.server.infill_api import InfillRequest
from radixlm.runtime.server.native_schemas import TOKEN_ID_REF
from radixlm.runtime.server.openai_protocol import ChatCompletionRequest, CompletionRequest
from radixlm.runtime.server.ops_api import DetokenizeRequest, TokenizeRequest
from radixlm.runtime.server.responses_protocol import ResponsesRequest
from radixlm.runtime.server.serving_mode import mode_error
from radixlm.runtime.server.weights_profile_api import ProfileRequest, UpdateWeightsRequest

OPENAPI_PATH = "/openapi.json"
# OpenAI field -> the sampling parameter it becomes (its range is that parameter's).
OPENAI_SAMPLING_FIELDS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "repetition_penalty": "repetition_penalty",
    "min_tokens": "min_new_tokens",
}
_REF = "#/components/schemas/{model}"
_MODELS: tuple[type[BaseModel], ...] = (
    CompletionRequest,
    ChatCompletionRequest,
    TokenizeRequest,
    DetokenizeRequest,
    MessagesRequest,
    UpdateWeightsRequest,
    ProfileRequest,
    CountTokensRequest,
    ResponsesRequest,
    InfillRequest,
    EmbeddingRequest,
    EncodeRequest,
    RerankRequest,
    ClassifyRequest,
)

# POST routes that read no body.
BODYLESS_POSTS = frozenset({"/health", "/flush_cache", "/health_generate", "/stop_profile"})
# path -> the body schema (given the server's arguments).
BODY_SCHEMAS: dict[str, Callable[[Any], dict[str, Any]]] = {
    "/generate": lambda args: {"$ref": _REF.format(model="GenerateRequest")},
    "/program": lambda args: native.program_schema(args.max_program_nodes),
    "/ui/api/program": lambda args: native.program_schema(args.max_program_nodes),
    "/abort_request": lambda args: native.ABORT_SCHEMA,
    "/concate_and_append_request": lambda args: {"description": "any JSON (a no-op)"},
    "/open_session": lambda args: native.OPEN_SESSION_SCHEMA,
    "/load_lora_adapter": lambda args: native.LOAD_LORA_SCHEMA,
    "/unload_lora_adapter": lambda args: native.UNLOAD_LORA_SCHEMA,
    "/close_session": lambda args: native.CLOSE_SESSION_SCHEMA,
    "/separate_reasoning": lambda args: native.SEPARATE_REASONING_SCHEMA,
    "/v1/completions": lambda args: {"$ref": _REF.format(model="CompletionRequest")},
    "/infill": lambda args: {"$ref": _REF.format(model="InfillRequest")},
    "/v1/chat/completions": lambda args: {"$ref": _REF.format(model="ChatCompletionRequest")},
    "/v1/responses": lambda args: {"$ref": _REF.format(model="ResponsesRequest")},
    "/v1/embeddings": lambda args: {"$ref": _REF.format(model="EmbeddingRequest")},
    "/encode": lambda args: {"$ref": _REF.format(model="EncodeRequest")},
    "/v1/rerank": lambda args: {"$ref": _REF.format(model="RerankRequest")},
    "/rerank": lambda args: {"$ref": _REF.format(model="RerankRequest")},
    "/classify": lambda args: {"$ref": _REF.format(model="ClassifyRequest")},
    "/v1/classify": lambda args: {"$ref": _REF.format(model="ClassifyRequest")},
    "/tokenize": lambda args: {"$ref": _REF.format(model="TokenizeRequest")},
    "/v1/tokenize": lambda args: {"$ref": _REF.format(model="TokenizeRequest")},
    "/detokenize": lambda args: {"$ref": _REF.format(model="DetokenizeRequest")},
    "/v1/detokenize": lambda args: {"$ref": _REF.format(model="DetokenizeRequest")},
    "/v1/messages": lambda args: {"$ref": _REF.format(model="MessagesRequest")},
    "/v1/messages/count_tokens": lambda args: {"$ref": _REF.format(model="CountTokensRequest")},
    "/update_weights_from_disk": lambda args: {"$ref": _REF.format(model="UpdateWeightsRequest")},
    "/start_profile": lambda args: {"$ref": _REF.format(model="ProfileRequest")},
}
STREAMING = frozenset(
    {"/generate", "/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/messages"}
)
TEXT_RESPONSES = frozenset({"/flush_cache", "/metrics", "/start_profile", "/stop_profile"})
OTHER_RESPONSES = {  # the web playground (radixlm/web): its page, its files, its program stream
    "/": {"text/html": {"schema": {"type": "string"}}},
    "/ui/{name}": {"*/*": {"schema": {"type": "string"}}},
    "/ui/api/program": {"application/x-ndjson": {"schema": {"type": "string"}}},
}
EMPTY_RESPONSES = frozenset({"/health", "/health_generate", "/close_session"})
# Every operation may get these: the front door's refusals and a full or draining server.
_COMMON_ERRORS = {
    "400": "invalid request (the message names the field)",
    "401": "missing or wrong API key",
    "403": "cross-origin request from an origin not allowed",
    "413": "body larger than --max-request-bytes",
    "415": "body is not JSON",
    "421": "Host header not served here",
    "503": "at capacity, shutting down, or unhealthy (Retry-After)",
}
_EXTRA_ERRORS = {
    "/metrics": {"404": "metrics are off"},
    "/v1/models/{model_id}": {"404": "no such model"},
    "/open_session": {"429": "too many open sessions"},
    "/v1/responses/{response_id}": {"404": "no stored response with that id"},
    "/ui/{name}": {"404": "no such playground file"},
}
ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": "integer"},
            },
        }
    },
}


def openapi_document(app: Any, server_args: Any, vocab_size: int | None = None) -> dict[str, Any]:
    """The whole document for ``app`` (every route it serves) under ``server_args``' limits; prompt
    token ids are bounded by ``vocab_size`` when given."""
    from fastapi.openapi.utils import get_openapi

    with warnings.catch_warnings():  # routes serving GET and POST share an operation id: renamed below
        warnings.simplefilter("ignore", UserWarning)
        doc = get_openapi(
            title="radixlm",
            version=app.state.version,
            routes=app.routes,
            description="Native (SGLang-compatible) and OpenAI-compatible HTTP API of radixlm.",
        )
    doc["components"] = {"schemas": _components(server_args)}
    token_id: dict[str, Any] = {"type": "integer", "minimum": 0}
    if vocab_size:
        token_id["maximum"] = vocab_size - 1
    doc["components"]["schemas"]["TokenId"] = token_id
    _bound_encode_inputs(doc["components"]["schemas"])
    doc["paths"][OPENAPI_PATH] = {"get": {"summary": "This document", "responses": {}}}
    embedding = bool(getattr(server_args, "is_embedding", False))
    doc["paths"] = {p: ops for p, ops in doc["paths"].items() if mode_error(p, embedding) is None}
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            _describe(path, method, operation, server_args)
    return doc


_TEXT = {"type": "string", "minLength": 1}
_IDS = {"type": "array", "minItems": 1, "items": TOKEN_ID_REF}
# The embedding routes' inputs as the server accepts them: nothing empty, ids in the vocabulary
# (the pydantic models stay loose so that the server's own messages name the field).
_ENCODE_INPUT = {
    "anyOf": [
        _TEXT,
        {"type": "array", "minItems": 1, "items": _TEXT},
        _IDS,
        {"type": "array", "minItems": 1, "items": _IDS},
    ]
}
_ENCODE_FIELDS = {
    "EmbeddingRequest": {"input": _ENCODE_INPUT},
    "ClassifyRequest": {"input": _ENCODE_INPUT},
    "EncodeRequest": {
        "text": {"anyOf": [*_ENCODE_INPUT["anyOf"][:2], {"type": "null"}]},
        "input_ids": {"anyOf": [*_ENCODE_INPUT["anyOf"][2:], {"type": "null"}]},
    },
}
_ONE_OF_TEXT_OR_IDS = [
    {"required": [field], "properties": {field: {"not": {"type": "null"}}}} for field in ("text", "input_ids")
]


def _bound_encode_inputs(schemas: dict[str, Any]) -> None:
    for model, fields in _ENCODE_FIELDS.items():
        props = schemas[model]["properties"]
        for field, schema in fields.items():
            props[field] = {**schema, "title": props[field].get("title", field)}
    schemas["EncodeRequest"]["anyOf"] = _ONE_OF_TEXT_OR_IDS


ANTHROPIC_ERROR_SCHEMA = {
    "type": "object",
    "required": ["type", "error"],
    "properties": {
        "type": {"const": "error"},
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
        },
    },
}


def _describe(path: str, method: str, operation: dict[str, Any], server_args: Any) -> None:
    operation["operationId"] = f"{method}_{re.sub(r'[^A-Za-z0-9]+', '_', path).strip('_')}"
    if method == "post" and path not in BODYLESS_POSTS:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": BODY_SCHEMAS[path](server_args)}},
        }
    responses = {"200": _ok(path)}
    errors = {**_COMMON_ERRORS, **_EXTRA_ERRORS.get(path, {})}
    error_model = "AnthropicError" if path.startswith(ANTHROPIC_PATH) else "Error"
    for status, why in errors.items():
        responses[status] = {
            "description": why,
            "content": {"application/json": {"schema": {"$ref": _REF.format(model=error_model)}}},
        }
    operation["responses"] = responses


def _ok(path: str) -> dict[str, Any]:
    if path in EMPTY_RESPONSES:
        return {"description": "OK"}
    if path in TEXT_RESPONSES:
        return {"description": "OK", "content": {"text/plain": {"schema": {"type": "string"}}}}
    if path in OTHER_RESPONSES:
        return {"description": "OK", "content": OTHER_RESPONSES[path]}
    content: dict[str, Any] = {"application/json": {"schema": {}}}
    if path in STREAMING:
        content["text/event-stream"] = {"schema": {"type": "string"}}
    return {
        "description": "OK (text/event-stream when the body asks to stream)" if path in STREAMING else "OK",
        "content": content,
    }


def _components(server_args: Any) -> dict[str, Any]:
    schemas: dict[str, Any] = {
        "Error": ERROR_SCHEMA,
        "AnthropicError": ANTHROPIC_ERROR_SCHEMA,
        "SamplingParams": _with_limits(sampling_params_schema(), server_args),
        "GenerateRequest": native.generate_schema(),
        "SessionParams": native.SESSION_PARAMS_SCHEMA,
    }
    for model in _MODELS:
        schema = model.model_json_schema(ref_template=_REF)
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    for name in ("CompletionRequest", "ChatCompletionRequest", "InfillRequest"):
        props = schemas[name]["properties"]
        for field, param in OPENAI_SAMPLING_FIELDS.items():  # checked by SamplingParams, not pydantic
            if field in props:
                props[field] = {"anyOf": [NUMBER_RULES[param].json_schema(), {"type": "null"}]}
        if "n" not in props:
            continue
        props["n"]["maximum"] = min(props["n"].get("maximum", server_args.max_n), server_args.max_n)
    return schemas


def _with_limits(schema: dict[str, Any], server_args: Any) -> dict[str, Any]:
    """The sampling parameters under this server's ``--max-n`` and stop-string limits."""
    props = schema["properties"]
    props["n"] = {**props["n"], "maximum": server_args.max_n}
    one, many, null = props["stop"]["anyOf"]
    one = {**one, "maxLength": MAX_STOP_CHARS}
    props["stop"] = {"anyOf": [one, {**many, "items": one, "maxItems": server_args.max_stop_strings}, null]}
    return schema
