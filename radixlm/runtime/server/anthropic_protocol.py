"""Request bodies of the Anthropic Messages API (``/v1/messages``, ``/v1/messages/count_tokens``).

Parsed strictly like the OpenAI bodies: fields we do not implement are refused with a 400, never
ignored (one extension: SGLang's ``regex``). ``cache_control`` is accepted everywhere Anthropic
allows it and does nothing (the radix cache reuses every shared prefix on its own). Content blocks
are checked one by one in ``anthropic_messages``, so an unknown block type gets a 400 naming it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TextBlock(_Strict):
    type: Literal["text"]
    text: str
    cache_control: dict[str, Any] | None = None
    citations: list[Any] | None = None  # echoed back by clients; nothing to cite here


class ToolUseBlock(_Strict):
    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]
    cache_control: dict[str, Any] | None = None


class ToolResultBlock(_Strict):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: str | list[TextBlock] | None = None
    is_error: bool = False
    cache_control: dict[str, Any] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(block.text for block in self.content)
        return self.content or ""


class ThinkingBlock(_Strict):
    """Earlier thinking in the history: accepted and left out of the prompt (as chat templates do)."""

    type: Literal["thinking"]
    thinking: str
    signature: str | None = None
    cache_control: dict[str, Any] | None = None


class RedactedThinkingBlock(_Strict):
    type: Literal["redacted_thinking"]
    data: str


BLOCK_TYPES: dict[str, type[_Strict]] = {
    "text": TextBlock,
    "tool_use": ToolUseBlock,
    "tool_result": ToolResultBlock,
    "thinking": ThinkingBlock,
    "redacted_thinking": RedactedThinkingBlock,
}
Block = TextBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock


class InputMessage(_Strict):
    role: Literal["user", "assistant"]
    content: str | list[dict[str, Any]]


class AnthropicTool(_Strict):
    """A client tool (``type`` absent or ``custom``); server tools (web search, bash, ...) are refused."""

    type: Literal["custom"] | None = None
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_\-]+$")
    description: str | None = None
    input_schema: dict[str, Any]
    cache_control: dict[str, Any] | None = None
    strict: bool | None = None  # calls under any/tool always follow the schema

    def as_openai(self) -> dict[str, Any]:
        function: dict[str, Any] = {"name": self.name, "parameters": self.input_schema}
        if self.description is not None:
            function["description"] = self.description
        return {"type": "function", "function": function}


class ToolChoice(_Strict):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None

    @model_validator(mode="after")
    def _name_only_for_tool(self) -> ToolChoice:
        if (self.type == "tool") != (self.name is not None):
            raise ValueError('name is required with type "tool" and only there')
        return self

    def as_openai(self) -> Any:
        if self.type == "tool":
            return {"type": "function", "function": {"name": self.name}}
        return {"auto": "auto", "any": "required", "none": "none"}[self.type]


class Thinking(_Strict):
    """``enabled`` / ``adaptive`` / ``disabled``: the chat template's ``enable_thinking``; the split
    into thinking blocks needs ``--reasoning-parser``. ``budget_tokens`` is checked, not enforced."""

    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(None, ge=1)
    display: Literal["summarized", "omitted"] | None = None

    @model_validator(mode="after")
    def _budget_when_enabled(self) -> Thinking:
        if self.type == "enabled" and self.budget_tokens is None:
            raise ValueError('budget_tokens is required with type "enabled"')
        return self


class Metadata(_Strict):
    user_id: str | None = None  # accepted, not used


class JsonOutputFormat(_Strict):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(_Strict):
    format: JsonOutputFormat | None = None


class CountTokensRequest(_Strict):
    """The prompt part of a request (the whole body of ``/v1/messages/count_tokens``)."""

    model: str
    messages: list[InputMessage] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    tools: list[AnthropicTool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None

    def system_text(self) -> str | None:
        if isinstance(self.system, list):
            return "\n".join(block.text for block in self.system)
        return self.system


class MessagesRequest(CountTokensRequest):
    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    metadata: Metadata | None = None
    service_tier: Literal["auto", "standard_only"] | None = None  # one tier here
    cache_control: dict[str, Any] | None = None
    regex: str | None = None  # SGLang's extension, as on the OpenAI routes: the answer matches it
    priority: int | None = None  # SGLang's (runtime/scheduler/priority.py), an extra body field

    @model_validator(mode="after")
    def _budget_below_max_tokens(self) -> MessagesRequest:
        budget = self.thinking.budget_tokens if self.thinking is not None else None
        if budget is not None and budget >= self.max_tokens:
            raise ValueError("thinking.budget_tokens must be less than max_tokens")
        return self
