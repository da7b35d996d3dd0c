"""An Anthropic Messages request as the chat completion request it means, so the chat path (template,
tool prompt, tool grammars, reasoning parser: ``chat_plan``) serves both APIs.

- ``system`` -> a system message; a user turn's ``tool_result`` blocks -> ``tool`` messages (an error
  result's text starts with ``ERROR_PREFIX``), its text -> a user message; an assistant turn's
  ``tool_use`` blocks -> ``tool_calls``; earlier ``thinking`` blocks are left out.
- A ``tool_result`` must answer a ``tool_use`` of the assistant turn just before it (400 otherwise).
- A final assistant turn is a prefill: the answer continues its text (``prefill``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from radixlm.runtime.server.anthropic_protocol import (
    BLOCK_TYPES,
    Block,
    CountTokensRequest,
    MessagesRequest,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from radixlm.runtime.server.errors import ApiError
from radixlm.runtime.server.openai_protocol import ChatCompletionRequest

ERROR_PREFIX = "Error: "


@dataclass
class ChatTranslation:
    chat: ChatCompletionRequest
    prefill: str  # text the answer continues ("" when the last turn is the user's)
    parallel_tool_use: bool  # False: at most one tool_use block in the answer


def parse_blocks(content: str | list[dict[str, Any]], where: str) -> list[Block]:
    """A message's content as blocks; 400 naming an unknown or malformed block."""
    if isinstance(content, str):
        return [TextBlock(type="text", text=content)]
    blocks: list[Block] = []
    for j, raw in enumerate(content):
        kind = raw.get("type")
        model = BLOCK_TYPES.get(kind) if isinstance(kind, str) else None
        if model is None:
            known = ", ".join(BLOCK_TYPES)
            raise ApiError(f"{where}.{j}: unsupported content block type {kind!r} (supported: {known})")
        try:
            blocks.append(model.model_validate(raw, strict=True))  # type: ignore[arg-type]
        except ValidationError as e:
            first = e.errors()[0]
            field = ".".join(str(p) for p in first["loc"])
            raise ApiError(f"{where}.{j}.{field}: {first['msg']}" if field else first["msg"]) from e
    return blocks


def _assistant(blocks: list[Block], where: str) -> dict[str, Any]:
    text, calls = [], []
    for j, block in enumerate(blocks):
        if isinstance(block, TextBlock):
            text.append(block.text)
        elif isinstance(block, ToolUseBlock):
            function = {"name": block.name, "arguments": json.dumps(block.input, ensure_ascii=False)}
            calls.append({"id": block.id, "type": "function", "function": function})
        elif isinstance(block, ToolResultBlock):
            raise ApiError(f"{where}.{j}: tool_result blocks belong in user messages")
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
    if calls:
        message["tool_calls"] = calls
    return message


def _user(blocks: list[Block], where: str, open_calls: set[str]) -> list[dict[str, Any]]:
    results, text = [], []
    for j, block in enumerate(blocks):
        if isinstance(block, ToolResultBlock):
            if block.tool_use_id not in open_calls:
                raise ApiError(
                    f"{where}.{j}: tool_result for tool_use_id {block.tool_use_id!r} answers no tool_use "
                    "block of the assistant message just before it"
                )
            content = (ERROR_PREFIX if block.is_error else "") + block.text()
            results.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": content})
        elif isinstance(block, TextBlock):
            text.append(block.text)
        elif not isinstance(block, ThinkingBlock):
            raise ApiError(f"{where}.{j}: {block.type} blocks belong in assistant messages")
    return results + ([{"role": "user", "content": "".join(text)}] if text or not results else [])


def chat_messages(req: CountTokensRequest) -> tuple[list[dict[str, Any]], str]:
    """(OpenAI-style chat messages, prefill text)."""
    out: list[dict[str, Any]] = []
    system = req.system_text()
    if system:
        out.append({"role": "system", "content": system})
    open_calls: set[str] = set()
    prefill = ""
    for i, message in enumerate(req.messages):
        where = f"messages.{i}.content"
        blocks = parse_blocks(message.content, where)
        if message.role == "user":
            out.extend(_user(blocks, where, open_calls))
            open_calls = set()
            continue
        turn = _assistant(blocks, where)
        open_calls = {call["id"] for call in turn.get("tool_calls", [])}
        if i == len(req.messages) - 1 and not open_calls:
            prefill = turn["content"]
        else:
            out.append(turn)
    return out, prefill


def chat_request(req: CountTokensRequest) -> ChatTranslation:
    """The chat completion request ``req`` means; ``ApiError`` naming what cannot be served."""
    messages, prefill = chat_messages(req)
    choice = req.tool_choice
    body: dict[str, Any] = {"messages": messages}
    if req.tools:
        body["tools"] = [tool.as_openai() for tool in req.tools]
    if choice is not None:
        body["tool_choice"] = choice.as_openai()
    single = choice is not None and bool(choice.disable_parallel_tool_use)
    if single:
        body["parallel_tool_calls"] = False
    if req.thinking is not None:
        body["chat_template_kwargs"] = {"enable_thinking": req.thinking.type != "disabled"}
    if req.output_config is not None and req.output_config.format is not None:
        schema = req.output_config.format.schema_
        body["response_format"] = {"type": "json_schema", "json_schema": {"schema": schema}}
    if isinstance(req, MessagesRequest):
        sampling = {
            "max_tokens": req.max_tokens,
            "stop": req.stop_sequences,
            "temperature": req.temperature,
            "top_p": req.top_p,
            "top_k": req.top_k,
            "regex": req.regex,
        }
        body.update({k: v for k, v in sampling.items() if v is not None})
    if prefill and (req.thinking is not None and req.thinking.type != "disabled"):
        raise ApiError("an assistant prefill (a last assistant message) cannot be combined with thinking")
    if prefill and choice is not None and choice.type in ("any", "tool"):
        raise ApiError("an assistant prefill cannot be combined with tool_choice any or tool")
    try:
        chat = ChatCompletionRequest.model_validate(body)
    except ValidationError as e:
        first = e.errors()[0]
        raise ApiError(f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from e
    return ChatTranslation(chat, prefill, not single)
