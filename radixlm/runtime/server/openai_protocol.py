"""Request bodies of the OpenAI-compatible API and their translation to ``SamplingParams``.

Fields we do not implement are rejected with a 400 when set (never silently ignored); SGLang's
extensions (``top_k``, ``min_p``, ``regex``, ``json_schema``, ...) are accepted as extra fields.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from radixlm.runtime.sampling.sampling_params import SamplingParams
from radixlm.runtime.server.errors import ApiError
from radixlm.runtime.server.function_call.protocol import Tool, ToolChoice


class StreamOptions(BaseModel):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class ResponseFormat(BaseModel):
    """``structural_tag`` (SGLang): ``structures`` [{begin, schema, end}] and ``triggers`` [str]."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["text", "json_object", "json_schema", "structural_tag"]
    json_schema: dict[str, Any] | None = None
    structures: list[Any] | None = None
    triggers: list[Any] | None = None


class _SamplingFields(BaseModel):
    """Fields common to completions and chat completions."""

    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    max_tokens: int | None = Field(None, ge=0)
    temperature: float | None = None
    top_p: float | None = None
    n: int = Field(1, ge=1, le=128)
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    response_format: ResponseFormat | None = None
    logit_bias: dict[str, float] | None = None  # token id -> bias in [-100, 100]
    # Accepted and not used: they do not change the output.
    user: str | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    service_tier: str | None = None
    # SGLang / vLLM extensions
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    priority: int | None = None  # SGLang's (runtime/scheduler/priority.py)
    min_tokens: int | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    regex: str | None = None
    json_schema: str | dict[str, Any] | None = None
    stop_regex: str | list[str] | None = None
    ebnf: str | None = None
    rid: str | None = None
    custom_logit_processor: str | None = None  # with --enable-custom-logit-processor
    custom_params: dict[str, Any] | None = None

    def sampling_params(self, max_new_tokens: int | None) -> SamplingParams:
        """``max_new_tokens`` None: up to the context (the manager caps it per prompt)."""
        d: dict[str, Any] = {
            "n": self.n,
            "ignore_eos": self.ignore_eos,
            "no_stop_trim": self.no_stop_trim,
            "skip_special_tokens": self.skip_special_tokens,
            "spaces_between_special_tokens": self.spaces_between_special_tokens,
        }
        if max_new_tokens is not None:
            d["max_new_tokens"] = max_new_tokens
        optional = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "seed": self.seed,
            "presence_penalty": self.presence_penalty,
            "frequency_penalty": self.frequency_penalty,
            "top_k": self.top_k,
            "min_p": self.min_p,
            "repetition_penalty": self.repetition_penalty,
            "min_new_tokens": self.min_tokens,
            "stop": self.stop,
            "stop_token_ids": self.stop_token_ids,
            "regex": self.regex,
            "json_schema": self.json_schema,
            "stop_regex": self.stop_regex,
            "logit_bias": self.logit_bias or None,
            "ebnf": self.ebnf,
            "custom_logit_processor": self.custom_logit_processor,
            "custom_params": self.custom_params,
        }
        d.update({k: v for k, v in optional.items() if v is not None})
        schema = self._response_format_schema()
        if schema is not None:
            if "regex" in d or "json_schema" in d or "ebnf" in d:
                raise ApiError(
                    "give only one of response_format, regex, json_schema and ebnf", param="response_format"
                )
            d[schema[0]] = schema[1]
        try:
            return SamplingParams.from_dict(d)
        except (ValueError, TypeError) as e:
            raise ApiError(str(e), param=_named_param(str(e))) from e

    def _response_format_schema(self) -> tuple[str, str] | None:
        """``(sampling parameter, value)`` for the response format, or None."""
        fmt = self.response_format
        if fmt is None or fmt.type == "text":
            return None
        if fmt.type == "json_object":
            return "json_schema", json.dumps({"type": "object"})
        if fmt.type == "structural_tag":
            return "structural_tag", json.dumps(fmt.model_dump(exclude_none=True))
        spec = fmt.json_schema or {}
        schema = spec.get("schema", spec.get("schema_"))
        if not isinstance(schema, dict):
            raise ApiError(
                "response_format.json_schema.schema must be a JSON schema object", param="response_format"
            )
        return "json_schema", json.dumps(schema)


class CompletionRequest(_SamplingFields):
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = Field(16, ge=0)
    logprobs: int | None = Field(None, ge=0, le=20)
    echo: bool = False
    suffix: str | None = None  # fill-in-the-middle: the text after the completion
    best_of: int | None = None  # only best_of == n


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[dict[str, Any]] | None = None

    def as_template_input(self, image_token: str | None = None) -> dict[str, Any]:
        """The message for the chat template; each ``image_url`` part becomes ``image_token`` (the
        model's image placeholder; None: a text-only model, which refuses images)."""
        content = self.content
        if isinstance(content, list):
            parts = []
            for part in content:
                if part.get("type") == "image_url":
                    if image_token is None:
                        raise ApiError("this model is text-only: it takes no images", param="messages")
                    parts.append(image_token)
                    continue
                if part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise ApiError(
                        f"only text and image_url content parts are supported, got {part.get('type')!r}",
                        param="messages",
                    )
                parts.append(part["text"])
            content = "".join(parts)
        role = "system" if self.role == "developer" else self.role
        return {"role": role, "content": content or ""}

    def image_urls(self) -> list[str]:
        """The ``image_url`` parts' URLs, in order."""
        if not isinstance(self.content, list):
            return []
        urls = []
        for part in self.content:
            if part.get("type") != "image_url":
                continue
            ref = part.get("image_url")
            url = ref.get("url") if isinstance(ref, dict) else ref
            if not isinstance(url, str):
                raise ApiError("an image_url part needs image_url.url (a string)", param="messages")
            urls.append(url)
        return urls


class ChatCompletionRequest(_SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=0)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    separate_reasoning: bool = True  # with --reasoning-parser: thinking in reasoning_content
    chat_template_kwargs: dict[str, Any] | None = None  # passed to the chat template (enable_thinking)


def _named_param(message: str) -> str | None:
    """The field a ``SamplingParams`` error names (``invalid sampling parameter NAME=...``)."""
    prefix = "invalid sampling parameter "
    return message[len(prefix) :].split("=", 1)[0] if message.startswith(prefix) else None


def parse_body(model: type[BaseModel], body: Any) -> Any:
    """Validate ``body`` against ``model``; a 400 naming the first bad field otherwise. Strict: a
    string is not a number and 1 is not ``true`` (the types the OpenAPI document publishes)."""
    if not isinstance(body, dict):
        raise ApiError("the request body must be a JSON object")
    try:
        return model.model_validate(body, strict=True)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or None
        raise ApiError(f"{where}: {first['msg']}" if where else first["msg"], param=where) from e
