"""The request body of ``POST /v1/responses`` and its translation to a chat completion request.

A Responses request is planned as the chat completion it amounts to (``chat_plan.plan_chat``): its
conversation items become chat messages (``responses_items``), its flat function tools become chat
tools, ``text.format`` becomes ``response_format``, ``max_output_tokens`` becomes
``max_completion_tokens``. Fields we do not implement are rejected with a 400 when set.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from radixlm.runtime.server.errors import ApiError
from radixlm.runtime.server.function_call.protocol import FUNCTION_NAME_PATTERN
from radixlm.runtime.server.openai_protocol import ChatCompletionRequest, parse_body


class FunctionTool(BaseModel):
    """A Responses function tool: the chat tool's ``function`` fields, flat."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    name: str = Field(min_length=1, max_length=64, pattern=FUNCTION_NAME_PATTERN)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class FunctionChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    name: str


class TextFormat(BaseModel):
    """``text.format``: plain text, any JSON object, or JSON under a schema."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    description: str | None = None
    json_schema: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class TextConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None  # accepted, not used


class ReasoningConfig(BaseModel):
    """Accepted and echoed: the model thinks as its template and ``--reasoning-parser`` make it."""

    model_config = ConfigDict(extra="forbid")
    effort: str | None = None
    summary: str | None = None
    generate_summary: str | None = None


class ResponsesRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | FunctionChoice | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = None
    top_p: float | None = None
    previous_response_id: str | None = None
    store: bool = True
    stream: bool = False
    # Accepted and not used: they do not change the output.
    metadata: dict[str, str] | None = None
    user: str | None = None
    include: list[str] | None = None
    truncation: Literal["disabled"] | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    safety_identifier: str | None = None
    # SGLang / vLLM sampling extensions, as on chat completions
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    ignore_eos: bool = False
    regex: str | None = None
    ebnf: str | None = None
    priority: int | None = None  # SGLang's (runtime/scheduler/priority.py)

    def tool_choice_value(self) -> Any:
        """``tool_choice`` as the response object echoes it."""
        choice = self.tool_choice
        if isinstance(choice, FunctionChoice):
            return choice.model_dump()
        return choice if choice is not None else ("auto" if self.tools else "none")

    def text_value(self) -> dict[str, Any]:
        fmt = self.text.format if self.text and self.text.format else None
        if fmt is None:
            return {"format": {"type": "text"}}
        return {"format": fmt.model_dump(by_alias=True, exclude_none=True)}


EXTENSIONS = ("top_k", "min_p", "repetition_penalty", "seed", "stop", "ignore_eos", "regex", "ebnf")


def chat_request(req: ResponsesRequest, messages: list[dict[str, Any]]) -> ChatCompletionRequest:
    """The chat completion ``req`` amounts to, over ``messages`` (its conversation as chat messages)."""
    body: dict[str, Any] = {
        "messages": messages,
        "max_completion_tokens": req.max_output_tokens,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "parallel_tool_calls": req.parallel_tool_calls,
        "stream": req.stream,
        **{name: getattr(req, name) for name in EXTENSIONS},
    }
    if req.tools:
        body["tools"] = [
            {"type": "function", "function": t.model_dump(exclude={"type"}, exclude_none=True)}
            for t in req.tools
        ]
    if isinstance(req.tool_choice, FunctionChoice):
        body["tool_choice"] = {"type": "function", "function": {"name": req.tool_choice.name}}
    else:
        body["tool_choice"] = req.tool_choice
    fmt = req.text.format if req.text else None
    if fmt is not None and fmt.type == "json_schema" and fmt.json_schema is None:
        raise ApiError("text.format.schema must be a JSON schema object", param="text")
    if fmt is not None and fmt.type != "text":
        spec = {"name": fmt.name, "schema": fmt.json_schema, "strict": fmt.strict}
        body["response_format"] = {
            "type": fmt.type,
            "json_schema": spec if fmt.type == "json_schema" else None,
        }
    return parse_body(ChatCompletionRequest, {k: v for k, v in body.items() if v is not None})
