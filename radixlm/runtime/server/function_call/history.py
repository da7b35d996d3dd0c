"""Tool calls in a chat's history (an assistant message's ``tool_calls``), checked before any template
or parser reads them: a malformed call is the client's fault (400), never a 500 deep in rendering."""

from __future__ import annotations

from typing import Any

from radixlm.runtime.requests.json_bounds import InvalidJson, load_bounded_json
from radixlm.runtime.server.errors import ApiError


def check_history_tool_calls(messages: list[dict[str, Any]], max_depth: int) -> None:
    """Raise a 400 ``ApiError`` unless every ``tool_calls`` is a list of ``{"function": {"name": str,
    "arguments": JSON text or object}}`` with arguments nested at most ``max_depth`` levels."""
    for i, message in enumerate(messages):
        calls = message.get("tool_calls")
        if calls is None:
            continue
        where = f"messages[{i}].tool_calls"
        if not isinstance(calls, list):
            raise ApiError(f"{where} must be a list of tool calls", param="messages")
        for j, call in enumerate(calls):
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
                raise ApiError(
                    f'{where}[{j}] must be {{"type": "function", "function": {{"name": ..., '
                    '"arguments": ...}}',
                    param="messages",
                )
            _check_arguments(fn.get("arguments", "{}"), max_depth, f"{where}[{j}].function.arguments")


def _check_arguments(arguments: Any, max_depth: int, where: str) -> None:
    if isinstance(arguments, dict):
        return  # parsed by the front door, already bounded in depth
    if not isinstance(arguments, str):
        raise ApiError(f"{where} must be a JSON string or an object", param="messages")
    try:
        load_bounded_json(arguments, max_depth)
    except InvalidJson as e:
        if "nested deeper" in str(e):
            raise ApiError(f"{where}: {e}", param="messages") from e
        # NOTE: text that is not JSON is passed on as text (what the model wrote may be cut off)
