"""Responses conversation items as chat messages, and a finished output as output items.

Input items: messages (``role`` + text or ``input_text``/``output_text`` parts), ``function_call``
(consecutive calls join one assistant message's ``tool_calls``), ``function_call_output`` (a
``tool`` message; its ``call_id`` must name a call made earlier in the conversation) and
``reasoning`` (dropped: chat templates drop earlier turns' thinking). Our own output items are
input items, so a stored response's conversation is simply a list of items.
"""

from __future__ import annotations

from typing import Any

from radixlm.runtime.server.errors import ApiError

_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
_TEXT_PARTS = {"input_text", "output_text", "text"}
ITEM_TYPES = ("message", "function_call", "function_call_output", "reasoning")


def input_items(value: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``input`` as a list of items (a string is one user message)."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return list(value)


def items_to_messages(items: list[dict[str, Any]], first_new: int) -> list[dict[str, Any]]:
    """Chat messages (role, content and ``tool_calls`` / ``tool_call_id``) of a conversation; items
    from ``first_new`` on are this request's ``input`` (errors name them as ``input[i]``). Raises a
    400 ``ApiError`` naming the first item it cannot read."""
    messages: list[dict[str, Any]] = []
    calls: dict[str, str] = {}  # call_id -> function name
    for i, item in enumerate(items):
        where = f"input[{i - first_new}]" if i >= first_new else f"previous response item {i}"
        if not isinstance(item, dict):
            raise ApiError(f"{where} must be an object", param="input")
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            role = _ROLES.get(role) if isinstance(role, str) else None
            if role is None:
                raise ApiError(f"{where}.role must be one of {sorted(_ROLES)}", param="input")
            messages.append({"role": role, "content": _text(item.get("content"), f"{where}.content")})
        elif kind == "function_call":
            call_id, name = _string(item, "call_id", where), _string(item, "name", where)
            arguments = item.get("arguments", "{}")
            if not isinstance(arguments, str):
                raise ApiError(f"{where}.arguments must be a JSON string", param="input")
            calls[call_id] = name
            call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            if messages and messages[-1]["role"] == "assistant":
                messages[-1].setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            call_id = _string(item, "call_id", where)
            if call_id not in calls:
                raise ApiError(
                    f"{where}: no function_call with call_id {call_id!r} comes before this output",
                    param="input",
                )
            output = _text(item.get("output"), f"{where}.output")
            messages.append(
                {"role": "tool", "tool_call_id": call_id, "name": calls[call_id], "content": output}
            )
        elif kind != "reasoning":
            raise ApiError(
                f"{where}.type {kind!r} is not supported (expected one of {', '.join(ITEM_TYPES)})",
                param="input",
            )
    return messages


def _string(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise ApiError(f"{where}.{key} must be a non-empty string", param="input")
    return value


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ApiError(f"{where} must be a string or a list of text parts", param="input")
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
        elif kind in _TEXT_PARTS and isinstance(part.get("text"), str):
            texts.append(part["text"])
        else:
            raise ApiError(
                f"{where}[{j}]: only text parts (input_text, output_text) are supported, got {kind!r}",
                param="input",
            )
    return "".join(texts)
