"""Chat messages with tools, tool calls and tool results, rendered through the model's chat template.

A template that knows tools (it reads a ``tools`` variable) gets them and the messages as they are
(tool-call arguments as objects, as Hugging Face templates expect). A template that does not (e.g.
SmolLM2's plain ChatML) gets ``DEFAULT_TOOL_PROMPT`` in the system message, listing the tools and
how to call them in the parser's format; assistant tool calls become text in that format and tool
results become user messages wrapped in ``<tool_response>``.
"""

from __future__ import annotations

import json
from typing import Any

from radixlm.runtime.server.function_call.parsers import ToolCallParser
from radixlm.runtime.server.function_call.protocol import FunctionDef

DEFAULT_TOOL_PROMPT = (
    "You can call functions. The functions you may call, as JSON schemas:\n{tools}\n"
    "To call a function, answer with exactly:\n{example}\n"
    "and nothing else; the result comes back in a <tool_response> message. "
    "Otherwise answer the user directly."
)


def template_knows_tools(template: str | None) -> bool:
    return bool(template) and "tools" in template


def tool_prompt(functions: list[FunctionDef], parser: ToolCallParser) -> str:
    listed = "\n".join(
        json.dumps({"type": "function", "function": fn.model_dump(exclude_none=True)}, ensure_ascii=False)
        for fn in functions
    )
    example = parser.render_all([("function_name", {"argument": "value"})])
    return DEFAULT_TOOL_PROMPT.format(tools=listed, example=example)


def _arguments_object(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _calls(message: dict[str, Any]) -> list[tuple[str, Any]]:
    calls = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        calls.append((fn.get("name", ""), _arguments_object(fn.get("arguments", "{}"))))
    return calls


def messages_for_template(
    messages: list[dict[str, Any]], functions: list[FunctionDef], parser: ToolCallParser, template: str | None
) -> tuple[list[dict[str, Any]], list[dict] | None]:
    """(messages, tools) to pass to the template. ``messages`` are role/content dicts with their extras
    (``tool_calls``, ``tool_call_id``, ``name``)."""
    if template_knows_tools(template):
        out = []
        for m in messages:
            m = dict(m)
            if m.get("tool_calls"):
                m["tool_calls"] = [
                    {
                        **c,
                        "function": {
                            **c.get("function", {}),
                            "arguments": _arguments_object(c.get("function", {}).get("arguments", "{}")),
                        },
                    }
                    for c in m["tool_calls"]
                ]
            out.append(m)
        tools = [{"type": "function", "function": fn.model_dump(exclude_none=True)} for fn in functions]
        return out, tools or None
    out = []
    for m in messages:
        role, content = m["role"], m.get("content") or ""
        if role == "assistant" and m.get("tool_calls"):
            text = parser.render_all(_calls(m))
            out.append({"role": "assistant", "content": f"{content}\n{text}" if content else text})
        elif role == "tool":
            out.append({"role": "user", "content": f"<tool_response>\n{content}\n</tool_response>"})
        else:
            out.append({"role": role, "content": content})
    if functions:
        prompt = tool_prompt(functions, parser)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": out[0]["content"] + "\n\n" + prompt}
        else:
            out.insert(0, {"role": "system", "content": prompt})
    return _merge_consecutive_users(out), None


def _merge_consecutive_users(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Several tool results in a row become one user turn (templates may insist on alternation)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        both_results = (
            out
            and out[-1]["content"].startswith("<tool_response>")
            and m["content"].startswith("<tool_response>")
        )
        if both_results and m["role"] == "user" and out[-1]["role"] == "user":
            out[-1] = {"role": "user", "content": out[-1]["content"] + "\n" + m["content"]}
        else:
            out.append(m)
    return out
