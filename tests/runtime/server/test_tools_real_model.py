"""Tool calling with the real ``openai`` client on the default model (SmolLM2-135M): forced calls parse
and validate against each tool's schema, streamed or not; ``auto``; a tool-result round trip."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from radixlm.runtime.server.launch import launch_server
from tests.runtime.server.tool_schemas import SCHEMAS, tool

pytestmark = [pytest.mark.real_model, pytest.mark.slow]
MODEL = "smollm2-135m"
NAMES = list(SCHEMAS)


@pytest.fixture(scope="module")
def client(real_model_dir):
    with launch_server(model=MODEL, kv_cache_gb=0.25) as handle:
        yield openai.OpenAI(base_url=handle.url + "/v1", api_key="unused", max_retries=0)


def _ask(client, tools, tool_choice, stream, content="Please use a tool for this request.", **kw):
    messages = [{"role": "user", "content": content}]
    r = client.chat.completions.create(
        model=MODEL,
        messages=messages,
        tools=tools,
        tool_choice=tool_choice,
        temperature=0,
        max_tokens=160,
        stream=stream,
        **kw,
    )
    if not stream:
        return r.choices[0].message, r.choices[0].finish_reason
    calls, content, finish = {}, "", None
    for chunk in r:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        finish = chunk.choices[0].finish_reason or finish
        for c in delta.tool_calls or []:
            call = calls.setdefault(c.index, {"id": c.id, "name": "", "arguments": ""})
            call["name"] += (c.function.name or "") if c.function else ""
            call["arguments"] += (c.function.arguments or "") if c.function else ""
    return {"content": content, "calls": [calls[i] for i in sorted(calls)]}, finish


def _calls(message):
    if isinstance(message, dict):
        return [(c["name"], c["arguments"], c["id"]) for c in message["calls"]]
    return [(c.function.name, c.function.arguments, c.id) for c in message.tool_calls or []]


@pytest.mark.parametrize("i", range(len(NAMES)))
def test_forced_calls_validate_against_the_schema(client, i):
    """20 schemas: tool_choice required (with a second tool) or named; every third one streamed."""
    name, other = NAMES[i], NAMES[(i + 7) % len(NAMES)]
    tools = [tool(name), tool(other)]
    choice = "required" if i % 2 == 0 else {"type": "function", "function": {"name": name}}
    message, finish = _ask(
        client,
        tools,
        choice,
        stream=i % 3 == 0,
        content=f"Call {name.replace('_', ' ')} with sensible values.",
        parallel_tool_calls=False,
    )
    calls = _calls(message)
    assert finish == "tool_calls" and len(calls) == 1
    called, arguments, call_id = calls[0]
    assert called in ({name, other} if choice == "required" else {name})
    assert call_id.startswith("call_")
    jsonschema.validate(json.loads(arguments), SCHEMAS[called])


def test_required_streamed_equals_non_streamed(client):
    tools = [tool("get_weather"), tool("add")]
    question = "What is the weather in Paris?"
    # With parallel calls the 135M model may repeat its call until max_tokens: then both end "length".
    for parallel in (True, False):
        whole, whole_finish = _ask(
            client, tools, "required", stream=False, content=question, parallel_tool_calls=parallel
        )
        streamed, finish = _ask(
            client, tools, "required", stream=True, content=question, parallel_tool_calls=parallel
        )
        assert finish == whole_finish
        assert [c[:2] for c in _calls(whole)] == [c[:2] for c in _calls(streamed)]
        for name, arguments, _ in _calls(whole):
            jsonschema.validate(json.loads(arguments), SCHEMAS[name])
    assert finish == "tool_calls" and len(_calls(streamed)) == 1  # one call, and the grammar ends there


def test_auto_answers_text_or_a_parsed_call(client):
    tools = [tool("get_weather"), tool("add")]
    for stream in (False, True):
        message, finish = _ask(client, tools, "auto", stream=stream, content="What is the weather in Paris?")
        calls = _calls(message)
        if calls:
            assert finish == "tool_calls"
            for name, arguments, _ in calls:  # a call under auto is constrained once it opens
                jsonschema.validate(json.loads(arguments), SCHEMAS[name])
        else:
            content = message["content"] if isinstance(message, dict) else message.content
            assert finish in ("stop", "length") and content


def test_none_never_calls(client):
    message, finish = _ask(client, [tool("add")], "none", stream=False, content="Add 2 and 3.")
    assert not message.tool_calls and message.content


def test_tool_result_round_trip_ends_in_text(client):
    tools = [tool("get_weather")]
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = client.chat.completions.create(
        model=MODEL, messages=messages, tools=tools, tool_choice="required", temperature=0, max_tokens=80
    )
    call = first.choices[0].message.tool_calls[0]
    messages.append(first.choices[0].message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature_c": 21})})
    final = client.chat.completions.create(
        model=MODEL, messages=messages, tools=tools, temperature=0, max_tokens=40, tool_choice="none"
    )
    assert final.choices[0].finish_reason in ("stop", "length")
    assert final.choices[0].message.content and not final.choices[0].message.tool_calls
    # the tools stay in the prompt under "none": the whole first prompt is reused, not just the system
    # part before the tools (which is what a prompt without them shared)
    assert final.usage.prompt_tokens_details.cached_tokens >= 0.9 * first.usage.prompt_tokens


def test_bad_tool_requests_get_400_naming_the_field(client):
    with pytest.raises(openai.BadRequestError, match="tool_choice"):
        _ask(client, [tool("add")], {"type": "function", "function": {"name": "missing"}}, stream=False)
    with pytest.raises(openai.BadRequestError, match="tool_choice"):
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x"}], tool_choice="required"
        )
    with pytest.raises(openai.BadRequestError, match="tools"):
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "x"}],
            tools=[{"type": "function", "function": {"name": "bad name!"}}],
        )
