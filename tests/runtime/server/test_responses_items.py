"""Responses items <-> chat messages, and the output items and events built from growing snapshots."""

from __future__ import annotations

import pytest

from radixlm.runtime.server.errors import ApiError
from radixlm.runtime.server.function_call.parsers import PartialCall
from radixlm.runtime.server.function_call.streaming import ChatSnapshot
from radixlm.runtime.server.responses_items import items_to_messages
from radixlm.runtime.server.responses_output import OutputBuilder


def test_calls_join_one_assistant_message_and_outputs_become_tool_messages():
    items = [
        {"role": "developer", "content": "Be brief."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Let me look."}],
        },
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": '{"x": 1}'},
        {"type": "function_call_output", "call_id": "c2", "output": "two"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "one"}]},
    ]
    messages = items_to_messages(items, 0)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool"]
    assert messages[2]["content"] == "Let me look."
    assert [c["function"]["name"] for c in messages[2]["tool_calls"]] == ["f", "g"]
    assert messages[3] == {"role": "tool", "tool_call_id": "c2", "name": "g", "content": "two"}
    assert messages[4]["content"] == "one"


def test_an_output_names_the_call_it_answers_and_errors_name_the_input_item():
    history = [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}]
    answer = [{"type": "function_call_output", "call_id": "c1", "output": "x"}]
    assert items_to_messages(history + answer, 1)[-1]["role"] == "tool"
    with pytest.raises(ApiError, match=r"input\[0\]: no function_call with call_id 'c1'"):
        items_to_messages(answer, 0)
    with pytest.raises(ApiError, match=r"input\[0\]\.role must be one of"):
        items_to_messages([{"role": ["user"], "content": "a"}], 0)
    with pytest.raises(ApiError, match=r"input\[1\]\.type 'web_search_call' is not supported"):
        items_to_messages([{"role": "user", "content": "a"}, {"type": "web_search_call"}], 0)


def test_text_then_a_call_open_and_close_items_in_order():
    builder = OutputBuilder()
    steps = [
        ChatSnapshot(None, "He"),
        ChatSnapshot(None, "Hello"),
        ChatSnapshot(None, "Hello", [PartialCall("f", '{"a"')]),
        ChatSnapshot(None, "Hello", [PartialCall("f", '{"a": 1}', done=True)]),
    ]
    events = [e for k, snap in enumerate(steps) for e in builder.update(snap, k == len(steps) - 1)]
    assert [e["type"] for e in events] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
    ]
    message, call = builder.items
    assert message["content"][0]["text"] == "Hello" and message["status"] == "completed"
    assert call["arguments"] == '{"a": 1}' and call["name"] == "f" and call["call_id"].startswith("call_")
    assert [e["output_index"] for e in events if e["type"] == "response.output_item.done"] == [0, 1]


def test_an_empty_output_is_one_empty_message():
    builder = OutputBuilder()
    builder.status = "incomplete"
    events = builder.update(ChatSnapshot(None, ""), True)
    assert [e["type"] for e in events][-1] == "response.output_item.done"
    [message] = builder.items
    assert message["content"] == [{"type": "output_text", "text": "", "annotations": [], "logprobs": []}]
    assert message["status"] == "incomplete"
