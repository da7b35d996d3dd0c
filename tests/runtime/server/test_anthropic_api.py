"""The Anthropic Messages API with the real ``anthropic`` client against a tiny random model: text,
streaming (event sequence and that its deltas add up to the non-streamed answer), stop sequences, a
tool round trip under ``any``/``tool``, count_tokens, ``x-api-key`` auth and Anthropic's error shape."""

from __future__ import annotations

import json

import anthropic
import httpx
import pydantic
import pytest
from anthropic.types import Message, RawMessageStreamEvent

from radixlm.runtime.server.launch import launch_server

API_KEY = "sk-ant-test"
MODEL = "tiny"
USER = [{"role": "user", "content": "Say hi"}]
GREEDY = {"temperature": 0}  # the SDK has no temperature argument any more: sent as an extra field
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"enum": ["Paris", "Oslo", "Lima"]}},  # short: the random model's call ends
        "required": ["city"],
    },
}


@pytest.fixture(scope="module")
def server(tiny_llama_dir):
    with launch_server(
        model=tiny_llama_dir,
        device="cpu",
        num_threads=1,
        kv_cache_gb=0.02,
        context_length=1024,
        api_key=API_KEY,
        served_model_name=MODEL,
    ) as handle:
        yield handle


@pytest.fixture()
def client(server):
    return anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0)


def _post(server, path, body, **headers):
    headers = {"x-api-key": API_KEY, "anthropic-version": "2023-06-01", **headers}
    return httpx.post(server.url + path, json=body, headers=headers, timeout=60)


def test_text_message(client):
    r = client.messages.create(model=MODEL, max_tokens=6, messages=USER, extra_body=GREEDY)
    assert r.type == "message" and r.role == "assistant" and r.id.startswith("msg_")
    assert r.stop_reason == "max_tokens" and r.stop_sequence is None
    assert [b.type for b in r.content] == ["text"] and r.content[0].text
    assert r.usage.output_tokens == 6
    again = client.messages.create(
        model=MODEL,
        max_tokens=6,
        messages=USER,
        extra_body=GREEDY,
        system=[{"type": "text", "text": "Be brief."}],
    )
    assert again.usage.input_tokens + again.usage.cache_read_input_tokens > (
        r.usage.input_tokens + r.usage.cache_read_input_tokens
    )


def test_cache_reads_are_reported_and_count_tokens_counts_the_whole_prompt(client):
    messages = [{"role": "user", "content": "A long enough question to share a prefix. " * 4}]
    first = client.messages.create(model=MODEL, max_tokens=2, messages=messages, extra_body=GREEDY)
    second = client.messages.create(model=MODEL, max_tokens=2, messages=messages, extra_body=GREEDY)
    total = client.messages.count_tokens(model=MODEL, messages=messages).input_tokens
    assert first.usage.input_tokens + first.usage.cache_read_input_tokens == total
    assert second.usage.input_tokens + second.usage.cache_read_input_tokens == total
    assert second.usage.cache_read_input_tokens > total // 2  # the radix cache held the first prompt


def test_stream_events_add_up_to_the_message(client):
    whole = client.messages.create(model=MODEL, max_tokens=12, messages=USER, extra_body=GREEDY)
    with client.messages.stream(model=MODEL, max_tokens=12, messages=USER, extra_body=GREEDY) as stream:
        events = [event.type for event in stream if not event.type.startswith(("text", "input_json"))]
        final = stream.get_final_message()
    assert events[:2] == ["message_start", "content_block_start"]
    assert events[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(events[2:-3]) == {"content_block_delta"}
    assert final.content[0].text == whole.content[0].text
    assert final.stop_reason == whole.stop_reason == "max_tokens" and final.usage.output_tokens == 12


@pytest.mark.parametrize("tools", [False, True])
def test_raw_stream_follows_the_published_event_schemas(server, tools):
    body = {"model": MODEL, "max_tokens": 200, "messages": USER, "stream": True, **GREEDY}
    if tools:
        body.update(tools=[WEATHER], tool_choice={"type": "any", "disable_parallel_tool_use": True})
    with httpx.stream(
        "POST", server.url + "/v1/messages", json=body, headers={"x-api-key": API_KEY}, timeout=60
    ) as r:
        lines = [line for line in r.iter_lines() if line]
    names = [line[len("event: ") :] for line in lines if line.startswith("event: ")]
    data = [json.loads(line[len("data: ") :]) for line in lines if line.startswith("data: ")]
    assert [d["type"] for d in data] == names
    assert names[:3] == ["message_start", "ping", "content_block_start"] and names[-1] == "message_stop"
    events = pydantic.TypeAdapter(RawMessageStreamEvent)
    for d in data:
        if d["type"] != "ping":
            events.validate_python(d)
    deltas = {d["delta"]["type"] for d in data if d["type"] == "content_block_delta"}
    assert deltas == ({"input_json_delta"} if tools else {"text_delta"})
    body.pop("stream")
    Message.model_validate(_post(server, "/v1/messages", body).json())


def test_stop_sequence(client):
    free = (
        client.messages.create(model=MODEL, max_tokens=20, messages=USER, extra_body=GREEDY).content[0].text
    )
    stop = free[3:5]
    r = client.messages.create(
        model=MODEL, max_tokens=20, messages=USER, extra_body=GREEDY, stop_sequences=["\x00never", stop]
    )
    assert r.stop_reason == "stop_sequence" and r.stop_sequence == stop
    assert r.content[0].text == free[: free.index(stop)]


def _forced(client, messages, choice, stream=False):
    kw = dict(
        model=MODEL, max_tokens=200, messages=messages, tools=[WEATHER], tool_choice=choice, extra_body=GREEDY
    )
    if not stream:
        return client.messages.create(**kw)
    with client.messages.stream(**kw) as s:
        return s.get_final_message()


@pytest.mark.parametrize("choice", [{"type": "any"}, {"type": "tool", "name": "get_weather"}])
def test_forced_tool_use_round_trip(client, choice):
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    choice = {**choice, "disable_parallel_tool_use": True}
    first = _forced(client, messages, choice)
    streamed = _forced(client, messages, choice, stream=True)
    assert first.stop_reason == streamed.stop_reason == "tool_use"
    calls = [b for b in first.content if b.type == "tool_use"]
    assert (
        len(calls) == 1
        and calls[0].name == "get_weather"
        and calls[0].input["city"] in ("Paris", "Oslo", "Lima")
    )
    assert [(b.type, getattr(b, "input", None)) for b in streamed.content] == [
        (b.type, getattr(b, "input", None)) for b in first.content
    ]
    messages.append({"role": "assistant", "content": first.content})
    result = {"type": "tool_result", "tool_use_id": calls[0].id, "content": json.dumps({"temperature_c": 21})}
    messages.append({"role": "user", "content": [result]})
    answer = client.messages.create(
        model=MODEL, max_tokens=8, messages=messages, tools=[WEATHER], tool_choice={"type": "none"}
    )
    assert answer.stop_reason in ("end_turn", "max_tokens")
    assert [b.type for b in answer.content] == ["text"]
    assert answer.usage.cache_read_input_tokens >= 0.9 * first.usage.input_tokens  # tools kept under none


def test_error_result_and_thinking_history_are_accepted(client):
    messages = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "I should call it.", "signature": "x"},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "is_error": True,
                    "content": [{"type": "text", "text": "service down"}],
                },
                {"type": "text", "text": "Try to answer anyway."},
            ],
        },
    ]
    r = client.messages.create(model=MODEL, max_tokens=3, messages=messages, tools=[WEATHER])
    assert r.stop_reason in ("end_turn", "max_tokens", "tool_use")


def test_x_api_key_and_bearer_both_authenticate(server):
    assert _post(server, "/v1/messages/count_tokens", {"model": MODEL, "messages": USER}).status_code == 200
    bearer = httpx.post(
        server.url + "/v1/messages/count_tokens",
        json={"model": MODEL, "messages": USER},
        headers={"Authorization": f"Bearer {API_KEY}"},
    )
    assert bearer.status_code == 200
    wrong = _post(
        server, "/v1/messages", {"model": MODEL, "max_tokens": 1, "messages": USER}, **{"x-api-key": "no"}
    )
    assert wrong.status_code == 401
    assert wrong.json()["type"] == "error" and wrong.json()["error"]["type"] == "authentication_error"
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=server.url, api_key="wrong", max_retries=0).messages.create(
            model=MODEL, max_tokens=1, messages=USER
        )


BAD = [
    ({"model": MODEL, "messages": USER}, "max_tokens"),
    (
        {
            "model": MODEL,
            "max_tokens": 4,
            "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x"}]}],
        },
        "toolu_x",
    ),
    (
        {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image"}]}]},
        "'image'",
    ),
    ({"model": MODEL, "max_tokens": 4, "messages": USER, "tool_choice": {"type": "any"}}, "tool_choice"),
    (
        {
            "model": MODEL,
            "max_tokens": 4,
            "messages": USER,
            "tools": [WEATHER],
            "tool_choice": {"type": "tool", "name": "missing"},
        },
        "missing",
    ),
    ({"model": MODEL, "max_tokens": 4, "messages": USER, "thinking": {"type": "enabled"}}, "budget_tokens"),
    ({"model": MODEL, "max_tokens": 4, "messages": USER, "unknown_field": 1}, "unknown_field"),
    (
        {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "x" * 200_000}]},
        "characters",
    ),
]


@pytest.mark.parametrize("body,named", BAD)
def test_bad_requests_get_anthropics_400(server, client, body, named):
    r = _post(server, "/v1/messages", body)
    assert r.status_code == 400, r.text
    assert r.json()["type"] == "error" and r.json()["error"]["type"] == "invalid_request_error"
    assert named in r.json()["error"]["message"]
    if "max_tokens" in body:
        known = {k: v for k, v in body.items() if k != "unknown_field"}
        extra = {k: v for k, v in body.items() if k == "unknown_field"}
        with pytest.raises(anthropic.BadRequestError, match=named):
            client.messages.create(**known, extra_body=extra)


def test_litellm_speaks_to_the_endpoint(server, monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no download of its price list
    litellm = pytest.importorskip("litellm")
    kw = dict(model=f"anthropic/{MODEL}", api_base=server.url, api_key=API_KEY, temperature=0)
    text = litellm.completion(messages=USER, max_tokens=12, **kw)
    assert text.choices[0].finish_reason == "length" and text.usage.completion_tokens == 12
    chunks = list(litellm.completion(messages=USER, max_tokens=12, stream=True, **kw))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == (text.choices[0].message.content or "")
    tool = {"type": "function", "function": {"name": WEATHER["name"], "parameters": WEATHER["input_schema"]}}
    called = litellm.completion(
        messages=[{"role": "user", "content": "Weather in Oslo?"}],
        max_tokens=200,
        tools=[tool],
        tool_choice="required",
        parallel_tool_calls=False,
        **kw,
    )
    (call,) = called.choices[0].message.tool_calls
    assert called.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments)["city"] in ("Paris", "Oslo", "Lima")


def test_a_full_context_window_is_its_own_stop_reason(client):
    r = client.messages.create(
        model=MODEL, max_tokens=5000, messages=USER, extra_body={**GREEDY, "regex": "a{3000}"}
    )
    assert r.stop_reason == "model_context_window_exceeded"
    assert r.usage.input_tokens + r.usage.cache_read_input_tokens + r.usage.output_tokens == 1024


def test_an_assistant_prefill_is_continued(client):
    prefill = [*USER, {"role": "assistant", "content": "Hi th"}]
    counted = client.messages.count_tokens(model=MODEL, messages=prefill).input_tokens
    assert counted == client.messages.count_tokens(model=MODEL, messages=USER).input_tokens + len("Hi th")
    r = client.messages.create(model=MODEL, max_tokens=4, messages=prefill, extra_body=GREEDY)
    assert r.usage.input_tokens + r.usage.cache_read_input_tokens == counted and r.usage.output_tokens == 4
