"""A chat completion request with tools and/or a reasoning parser turned into a prompt, sampling params
and the reader of its output (the OpenAI chat handler's tools and reasoning part)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from radixlm.program.reasoning import get_reasoning_parser
from radixlm.runtime.sampling.sampling_params import SamplingParams
from radixlm.runtime.server.errors import ApiError
from radixlm.runtime.server.function_call.constraints import (
    response_format_after_reasoning,
    tool_sampling_params,
)
from radixlm.runtime.server.function_call.history import check_history_tool_calls
from radixlm.runtime.server.function_call.parsers import ToolCallParser
from radixlm.runtime.server.function_call.prompt import messages_for_template
from radixlm.runtime.server.function_call.protocol import FunctionDef, NamedToolChoice
from radixlm.runtime.server.function_call.registry import resolve_parser
from radixlm.runtime.server.function_call.streaming import ChatOutputReader, ChatSnapshot

BAN_BIAS = -100.0  # the lowest bias a client may send, OpenAI's "ban"


@dataclass
class ChatPlan:
    prompt: str
    sampling_params: SamplingParams
    reader: ChatOutputReader
    images: list[str] = field(default_factory=list)  # the image_url parts' URLs, in prompt order

    @staticmethod
    def finish_reason(reason: str | None, snap: ChatSnapshot) -> str | None:
        return "tool_calls" if snap.calls and reason == "stop" else reason


def _offered(req: Any) -> tuple[list[FunctionDef], list[FunctionDef], bool]:
    """(functions offered, functions a call must come from (empty: no call forced), tools enabled)."""
    functions = [t.function for t in req.tools or []]
    choice = req.tool_choice if req.tool_choice is not None else ("auto" if functions else "none")
    if choice != "none" and not functions:
        raise ApiError("tool_choice needs tools", param="tool_choice")
    if isinstance(choice, NamedToolChoice):
        named = [fn for fn in functions if fn.name == choice.function.name]
        if not named:
            raise ApiError(
                f"tool_choice names function {choice.function.name!r}, which is not in tools",
                param="tool_choice",
            )
        return functions, named, True
    if choice == "required":
        return functions, functions, True
    return functions, [], choice == "auto"


def _template_messages(req: Any, image_token: str | None) -> list[dict[str, Any]]:
    out = []
    for m in req.messages:
        d = m.as_template_input(image_token)
        extra = m.model_extra or {}
        for key in ("tool_calls", "tool_call_id", "name"):
            if extra.get(key) is not None:
                d[key] = extra[key]
        out.append(d)
    return out


def plan_chat(req: Any, tm: Any, server_args: Any, max_new_tokens: int | None) -> ChatPlan:
    """Raises ``ApiError`` naming the field a request gets wrong."""
    functions, forced, tools_on = _offered(req)
    image_token = tm.model_info.get("image_token")
    messages = _template_messages(req, image_token)
    images = [url for m in req.messages for url in m.image_urls()]
    check_history_tool_calls(messages, server_args.max_json_depth)
    uses_tool_messages = any(m["role"] == "tool" or m.get("tool_calls") for m in messages)
    parser: ToolCallParser | None = None
    if functions or uses_tool_messages:
        # NOTE: under tool_choice "none" the tools stay in the prompt (as OpenAI and vLLM do): the
        # prompt is the one the turns before rendered, so an agent's closing turn reuses their KV
        parser = resolve_parser(getattr(server_args, "tool_call_parser", None), tm.chat_template)
        messages, tools = messages_for_template(messages, functions, parser, tm.chat_template)
    else:
        tools = None
    prompt = tm.apply_chat_template(messages, tools, req.chat_template_kwargs or {})
    reasoning = get_reasoning_parser(getattr(server_args, "reasoning_parser", None))
    params = req.sampling_params(max_new_tokens)
    params = _constrain(params, functions if tools_on else [], forced, parser, req, reasoning)
    if functions and not tools_on and parser is not None:
        params = _ban_call_marker(params, parser, tm.tokenizer)
    reader = ChatOutputReader(reasoning if req.separate_reasoning else None, parser if tools_on else None)
    return ChatPlan(prompt, params, reader, images)


def _ban_call_marker(params: SamplingParams, parser: ToolCallParser, tokenizer: Any) -> SamplingParams:
    """Tools shown but no call allowed: where the format's call marker is one token, that token is
    banned (a marker spelled in several ordinary tokens is left alone; the output is read as text)."""
    marker = parser.trigger
    ids = tokenizer.encode(marker, add_special_tokens=False) if marker else []
    if len(ids) != 1:
        return params
    bias = dict(params.logit_bias or {})
    bias[ids[0]] = BAN_BIAS
    return dataclasses.replace(params, logit_bias=bias)


def _constrain(
    params: SamplingParams,
    functions: list[FunctionDef],
    forced: list[FunctionDef],
    parser: ToolCallParser | None,
    req: Any,
    reasoning: Any,
) -> SamplingParams:
    reasoning_end = reasoning.end if reasoning is not None else None
    user_grammar = params.regex or params.json_schema or params.choices
    if functions and parser is not None:
        offered = forced or functions
        parallel = req.parallel_tool_calls is not False and req.tool_choice == "required"
        try:
            extra = tool_sampling_params(offered, bool(forced), parser, parallel, reasoning_end)
        except ValueError as e:
            raise ApiError(str(e), param="tools") from e
        if extra and user_grammar:
            raise ApiError(
                "a constrained tool call cannot be combined with response_format, regex or json_schema",
                param="tool_choice",
            )
        return dataclasses.replace(params, **extra) if extra else params
    if reasoning_end is not None and params.json_schema:
        extra = response_format_after_reasoning(params.json_schema, reasoning_end)
        return dataclasses.replace(params, json_schema=None, **extra)
    return params
