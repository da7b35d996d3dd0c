"""Class 11 of issue 27 live, through the server on the tiny random model: under
``tool_choice="required"`` the grammar forces the call, so ``max_tokens`` shorter than one call cuts
it for certain (no luck needed from the model). A cut call comes back as no call, with finish reason
``length`` (streamed: at most the one call announced before the cut, unfinished); a model pushed to
go on calling (``ignore_eos``, ``min_tokens``) stops at ``MAX_PARALLEL_TOOL_CALLS`` parsed calls, and
at one without parallel calls."""

from __future__ import annotations

import json

import httpx
import pytest

from radixlm.runtime.server.function_call.constraints import MAX_PARALLEL_TOOL_CALLS
from radixlm.runtime.server.launch import launch_server
from tests.runtime.server.test_native_api import assert_kv_idle

USER = [{"role": "user", "content": "What is the weather?"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 3}},
                "required": ["city"],
            },
        },
    }
]
# the shortest call text is longer than this many tokens of the byte-level tokenizer
CUT = [1, 5, 12, 30, 50]


@pytest.fixture(scope="module")
def client(tiny_llama_dir):
    with launch_server(
        model=tiny_llama_dir, device="cpu", num_threads=1, kv_cache_gb=0.05, context_length=2048
    ) as server:
        with httpx.Client(base_url=server.url, timeout=300) as c:
            yield c
            assert_kv_idle(c)


def chat(client: httpx.Client, stream: bool, **extra) -> tuple[list[dict], str, str]:
    """(calls, content, finish reason) of a required call; streamed calls are put together."""
    body = {"messages": USER, "tools": TOOLS, "tool_choice": "required", "temperature": 0, **extra}
    if not stream:
        r = client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        message = choice["message"]
        return message.get("tool_calls") or [], message.get("content") or "", choice["finish_reason"]
    calls: list[dict] = []
    content, reason = "", None
    with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[6:])
            assert "error" not in event, event
            choice = event["choices"][0]
            reason = choice["finish_reason"] or reason
            content += choice["delta"].get("content") or ""
            for delta in choice["delta"].get("tool_calls") or []:
                if delta.get("id"):
                    calls.append({"function": {"name": delta["function"]["name"], "arguments": ""}})
                calls[delta["index"]]["function"]["arguments"] += delta["function"].get("arguments", "")
    return calls, content, reason


def parsed(call: dict) -> dict:
    assert call["function"]["name"] == "get_weather"
    arguments = json.loads(call["function"]["arguments"])
    assert isinstance(arguments, dict) and isinstance(arguments["city"], str), call
    return arguments


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("max_tokens", CUT)
def test_a_call_cut_by_max_tokens_is_no_call(client, max_tokens, stream):
    calls, content, reason = chat(client, stream, max_tokens=max_tokens)
    assert reason == "length"
    if stream:
        # NOTE: a streamed call is announced (id, name) before its arguments arrive and cannot be
        # taken back: a cut leaves at most that one call unfinished, and "length" says so
        assert len(calls) <= 1 and all(c["function"]["arguments"] != "{}" for c in calls)
    else:
        assert calls == []  # no call at all, so none with arguments that do not parse
    assert "arguments" not in content and "get_weather" not in content  # nor the call's text as content


def test_the_uncut_call_parses(client):
    calls, _, reason = chat(client, False, max_tokens=400, parallel_tool_calls=False)
    assert reason == "tool_calls" and len(calls) == 1
    parsed(calls[0])


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("push", [{"ignore_eos": True}, {"min_tokens": 1400}])
def test_parallel_calls_are_bounded(client, push, stream):
    """Pushed to go on, the model calls until it or the grammar ends the list; ``min_tokens`` bans the
    end (EOS) until the grammar allows nothing else, so the list ends exactly at the bound."""
    calls, _, reason = chat(client, stream, max_tokens=1500, **push)
    assert reason == "tool_calls"
    assert 1 <= len(calls) <= MAX_PARALLEL_TOOL_CALLS
    if "min_tokens" in push:
        assert len(calls) == MAX_PARALLEL_TOOL_CALLS
    for call in calls:
        parsed(call)
    single, _, reason = chat(client, stream, max_tokens=1500, parallel_tool_calls=False, **push)
    assert reason == "tool_calls" and len(single) == 1
    parsed(single[0])
