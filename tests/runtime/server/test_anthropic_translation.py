"""The Messages API's pieces without a server: a request as the chat request it means, the 400s of a
history that does not add up, and ``BlockWriter``'s events adding up to the blocks it keeps."""

from __future__ import annotations

import json

import pytest

from radixlm.runtime.server.anthropic_messages import ERROR_PREFIX, chat_request
from radixlm.runtime.server.anthropic_output import BlockWriter, stop_reason, usage
from radixlm.runtime.server.anthropic_protocol import MessagesRequest
from radixlm.runtime.server.errors import ApiError, error_body_for_path
from radixlm.runtime.server.function_call.parsers import PartialCall
from radixlm.runtime.server.function_call.streaming import ChatSnapshot
from radixlm.runtime.server.openai_protocol import parse_body

TOOL = {"name": "add", "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}


def _request(**body):
    return parse_body(MessagesRequest, {"model": "m", "max_tokens": 8, **body})


def test_blocks_become_chat_messages_with_tool_calls_and_results():
    req = _request(
        system=[{"type": "text", "text": "Be exact."}],
        messages=[
            {"role": "user", "content": "Add 2."},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "s"},
                    {"type": "text", "text": "Calling."},
                    {"type": "tool_use", "id": "t1", "name": "add", "input": {"a": 2}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "4"},
                    {"type": "text", "text": "And?"},
                ],
            },
        ],
        tools=[TOOL],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        stop_sequences=["END"],
        top_k=5,
    )
    t = chat_request(req)
    messages = [m.as_template_input() | (m.model_extra or {}) for m in t.chat.messages]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "user"]
    assert messages[2]["content"] == "Calling."  # the thinking block is left out
    assert messages[2]["tool_calls"][0]["function"] == {"name": "add", "arguments": json.dumps({"a": 2})}
    assert messages[3]["tool_call_id"] == "t1" and messages[3]["content"] == "4"
    assert t.chat.tool_choice == "required" and t.chat.parallel_tool_calls is False
    assert not t.parallel_tool_use and t.prefill == ""
    params = t.chat.sampling_params(t.chat.max_tokens)
    assert params.stop == ["END"] and params.top_k == 5 and params.max_new_tokens == 8


def test_error_results_prefill_and_named_tool():
    req = _request(
        messages=[
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "add", "input": {}}]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "is_error": True,
                        "content": [{"type": "text", "text": "boom"}],
                    }
                ],
            },
            {"role": "assistant", "content": "The answer is"},
        ],
        tools=[TOOL],
        tool_choice={"type": "tool", "name": "add"},
    )
    with pytest.raises(ApiError, match="prefill"):
        chat_request(req)
    t = chat_request(req.model_copy(update={"tool_choice": None}))
    assert t.prefill == "The answer is" and t.chat.messages[-1].role == "tool"
    assert t.chat.messages[-1].content == ERROR_PREFIX + "boom"
    named = chat_request(
        _request(
            messages=[{"role": "user", "content": "x"}],
            tools=[TOOL],
            tool_choice={"type": "tool", "name": "add"},
        )
    )
    assert named.chat.tool_choice.function.name == "add"


@pytest.mark.parametrize(
    "messages,named",
    [
        ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "nope"}]}], "nope"),
        ([{"role": "user", "content": [{"type": "document"}]}], "'document'"),
        ([{"role": "user", "content": [{"type": "text"}]}], "messages.0.content.0.text"),
        ([{"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "a"}]}], "user messages"),
        (
            [{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]}],
            "assistant",
        ),
        (
            [  # a result must answer the assistant turn just before it, not an older one
                {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a"}]},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a"}]},
            ],
            "'a'",
        ),
    ],
)
def test_histories_that_do_not_add_up_are_400s(messages, named):
    with pytest.raises(ApiError, match=named) as e:
        chat_request(_request(messages=messages))
    assert e.value.status_code == 400


def test_bodies_anthropic_refuses():
    user = [{"role": "user", "content": "x"}]
    with pytest.raises(ApiError, match="max_tokens"):
        parse_body(MessagesRequest, {"model": "m", "messages": user})
    with pytest.raises(ApiError, match="budget_tokens"):
        _request(messages=user, thinking={"type": "enabled", "budget_tokens": 8})
    with pytest.raises(ApiError, match="tool_choice"):
        _request(messages=user, tool_choice={"type": "any", "name": "add"})
    with pytest.raises(ApiError, match="tools.0.type"):
        _request(messages=user, tools=[{**TOOL, "type": "web_search_20250305"}])


def test_writer_events_add_up_to_its_blocks():
    writer = BlockWriter("msg_abc", max_calls=None)
    snaps = [
        ChatSnapshot("I", ""),
        ChatSnapshot("I think", ""),
        ChatSnapshot("I think", "Sure"),
        ChatSnapshot("I think", "Sure.", [PartialCall("add", '{"a"')]),
        ChatSnapshot("I think", "Sure.", [PartialCall("add", '{"a": 1}', True), PartialCall("add", "{")]),
        ChatSnapshot(
            "I think", "Sure.", [PartialCall("add", '{"a": 1}', True), PartialCall("add", "{}", True)]
        ),
    ]
    events = [e for snap in snaps for e in writer.update(snap)] + writer.finish()
    rebuilt: list[dict] = []
    for e in events:
        if e["type"] == "content_block_start":
            assert e["index"] == len(rebuilt)
            rebuilt.append({**e["content_block"], "partial": ""})
        elif e["type"] == "content_block_delta":
            block, delta = rebuilt[e["index"]], e["delta"]
            key = {"thinking_delta": "thinking", "text_delta": "text", "input_json_delta": "partial"}.get(
                delta["type"]
            )
            if key:
                block[key] += delta[key if key != "partial" else "partial_json"]
    for block in rebuilt:
        if block["type"] == "tool_use":
            block["input"] = json.loads(block["partial"])
        del block["partial"]
    assert rebuilt == writer.blocks
    assert [b["type"] for b in writer.blocks] == ["thinking", "text", "tool_use", "tool_use"]
    assert writer.blocks[2]["input"] == {"a": 1} and writer.blocks[2]["id"] != writer.blocks[3]["id"]
    stops = [e["index"] for e in events if e["type"] == "content_block_stop"]
    assert stops == [0, 1, 2, 3]


def test_one_call_when_parallel_use_is_disabled_and_stop_reasons():
    writer = BlockWriter("msg_1", max_calls=1)
    writer.update(ChatSnapshot(None, "", [PartialCall("add", "{}", True), PartialCall("add", "{}", True)]))
    writer.finish()
    assert [b["type"] for b in writer.blocks] == ["tool_use"]
    assert stop_reason({"type": "length"}, True, None) == ("max_tokens", None)
    assert stop_reason({"type": "length"}, False, None, room_left=False)[0] == "model_context_window_exceeded"
    assert stop_reason({"type": "stop", "matched": "END"}, False, ["END"]) == ("stop_sequence", "END")
    assert stop_reason({"type": "stop", "matched": 2}, True, ["END"]) == ("tool_use", None)
    assert stop_reason({"type": "stop", "matched": 2}, False, None) == ("end_turn", None)
    meta = {"prompt_tokens": 10, "cached_tokens": 6, "completion_tokens": 3}
    assert usage(meta) == {
        "input_tokens": 4,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 6,
        "output_tokens": 3,
    }


def test_front_door_errors_take_the_shape_of_the_path():
    assert error_body_for_path("/v1/messages", "no", 413)["error"] == {
        "type": "request_too_large",
        "message": "no",
    }
    assert error_body_for_path("/v1/messages/count_tokens", "no", 401)["type"] == "error"
    assert error_body_for_path("/v1/messagesx", "no", 401)["error"]["code"] == 401


def test_front_door_refusals_and_route_errors_on_messages_paths_are_anthropic_shaped():
    import types

    from fastapi.testclient import TestClient

    from radixlm.runtime.server.http_server import build_app
    from radixlm.runtime.server_args import ServerArgs

    args = ServerArgs(model="m", allowed_hosts="*", max_request_bytes=1000, api_key="k")
    client = TestClient(build_app(types.SimpleNamespace(metrics=None, finish_hooks=[]), args))
    key = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
    big = client.post("/v1/messages", json={"model": "m", "pad": "x" * 2000}, headers=key)
    assert big.status_code == 413 and big.json()["error"]["type"] == "request_too_large"
    wrong = client.post("/v1/messages/count_tokens", json={}, headers={"x-api-key": "no"})
    assert wrong.status_code == 401 and wrong.json()["error"]["type"] == "authentication_error"
    openai_shaped = client.post("/v1/chat/completions", json={}, headers={"x-api-key": "no"})
    assert openai_shaped.status_code == 401 and openai_shaped.json()["error"]["code"] == 401
    missing = client.post(
        "/v1/messages", json={"model": "m", "messages": [{"role": "user", "content": "x"}]}, headers=key
    )
    assert missing.status_code == 400 and missing.json() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "max_tokens: Field required"},
    }
