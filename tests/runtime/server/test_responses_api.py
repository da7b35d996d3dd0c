"""The Responses API (``/v1/responses``) with the real ``openai`` client against a tiny random model:
plain and streamed answers (the SDK parses every event into its typed models), forced tool calls,
``previous_response_id`` follow-ups served from the pinned KV, GET/DELETE, and 400s for bad input."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage

from radixlm.runtime.server.launch import launch_server

TOOL = {
    "type": "function",
    "name": "set_unit",
    "description": "Choose a unit.",
    "parameters": {
        "type": "object",
        "properties": {
            "unit": {"enum": ["c", "f"]},
            "digits": {"type": "integer", "minimum": 0, "maximum": 9},
        },
        "required": ["unit", "digits"],
        "additionalProperties": False,
    },
}
GREEDY = {"temperature": 0, "max_output_tokens": 8}


@pytest.fixture(scope="module")
def server(tiny_llama_dir):
    with launch_server(
        model=tiny_llama_dir,
        device="cpu",
        num_threads=1,
        kv_cache_gb=0.05,
        context_length=2048,
        served_model_name="tiny",
        max_stored_responses=3,
    ) as handle:
        yield handle


@pytest.fixture()
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture()
def http(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def _stats(http: httpx.Client) -> dict:
    return http.get("/get_server_info").json()["stats"]


def test_plain_answer_is_the_chat_completion_of_the_same_conversation(client):
    r = client.responses.create(model="tiny", input="Say hi", instructions="Be brief.", **GREEDY)
    chat = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi"}],
        temperature=0,
        max_tokens=8,
    )
    assert r.object == "response" and r.id.startswith("resp_") and r.model == "tiny"
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    [message] = r.output
    assert isinstance(message, ResponseOutputMessage) and message.role == "assistant"
    assert r.output_text == chat.choices[0].message.content
    assert r.usage.output_tokens == 8 and r.usage.input_tokens == chat.usage.prompt_tokens
    assert r.usage.total_tokens == r.usage.input_tokens + 8


def test_streamed_events_come_in_order_and_add_up_to_the_response(client):
    full = client.responses.create(model="tiny", input="Tell me", temperature=0, max_output_tokens=12)
    events = list(
        client.responses.create(
            model="tiny", input="Tell me", temperature=0, max_output_tokens=12, stream=True
        )
    )
    kinds = [e.type for e in events]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [i for i, k in enumerate(kinds) if k == "response.output_text.delta"]
    assert deltas, kinds
    assert kinds[: deltas[0]] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[deltas[-1] + 1 :] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",
    ]
    assert set(kinds[deltas[0] : deltas[-1] + 1]) == {"response.output_text.delta"}
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == full.output_text == events[-1].response.output_text
    assert events[0].response.status == "in_progress" and events[-1].response.usage.output_tokens == 12
    item_id = events[2].item.id
    assert all(e.item_id == item_id for e in events if hasattr(e, "item_id"))


@pytest.mark.parametrize("stream", [False, True])
def test_required_tool_choice_gives_arguments_that_parse(client, stream):
    kw = dict(model="tiny", input="Pick a unit.", tools=[TOOL], tool_choice="required", temperature=0)
    if not stream:
        r = client.responses.create(**kw, max_output_tokens=256)
    else:
        events = list(client.responses.create(**kw, max_output_tokens=256, stream=True))
        kinds = [e.type for e in events]
        assert kinds[-1] == "response.completed", kinds
        done = [e for e in events if e.type == "response.function_call_arguments.done"]
        assert done
        for d in done:  # each call's deltas add up to its arguments
            deltas = [
                e.delta for e in events if e.type.endswith("arguments.delta") and e.item_id == d.item_id
            ]
            assert "".join(deltas) == d.arguments
        assert kinds.index("response.function_call_arguments.done") < kinds.index("response.output_item.done")
        r = events[-1].response
    assert r.status == "completed"
    calls = [item for item in r.output if isinstance(item, ResponseFunctionToolCall)]
    assert calls and all(c.name == "set_unit" for c in calls)
    for call in calls:
        args = json.loads(call.arguments)
        assert args["unit"] in ("c", "f") and 0 <= args["digits"] <= 9
        assert call.call_id.startswith("call_") and call.status == "completed"


def test_tool_round_trip_with_previous_response_id_hits_the_cache(client, http):
    first = client.responses.create(
        model="tiny",
        input="Pick a unit.",
        instructions="Use the tool.",
        tools=[TOOL],
        tool_choice={"type": "function", "name": "set_unit"},
        temperature=0,
        max_output_tokens=256,
    )
    [call] = [item for item in first.output if isinstance(item, ResponseFunctionToolCall)]
    assert _stats(http)["num_pinned_contexts"] >= 1
    second = client.responses.create(
        model="tiny",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "done"}],
        instructions="Use the tool.",
        tools=[TOOL],
        **GREEDY,
    )
    assert second.previous_response_id == first.id
    # Everything the first turn computed (its prompt and output) came from the cache.
    cached = second.usage.input_tokens_details.cached_tokens
    assert cached >= first.usage.input_tokens + first.usage.output_tokens - 1
    for r in (first, second):
        client.responses.delete(r.id)


def test_plain_follow_up_continues_the_stored_conversation(client):
    first = client.responses.create(model="tiny", input="One", **GREEDY)
    second = client.responses.create(model="tiny", input="Two", previous_response_id=first.id, **GREEDY)
    assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens + 8 - 1
    whole = client.responses.create(
        model="tiny",
        input=[
            {"role": "user", "content": "One"},
            {"role": "assistant", "content": [{"type": "output_text", "text": first.output_text}]},
            {"role": "user", "content": "Two"},
        ],
        store=False,
        **GREEDY,
    )
    assert whole.usage.input_tokens == second.usage.input_tokens


def test_get_and_delete_release_the_pin(client, http):
    r = client.responses.create(model="tiny", input="Keep me", **GREEDY)
    pinned = _stats(http)["num_pinned_contexts"]
    assert pinned >= 1
    got = client.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == r.output_text
    deleted = http.delete(f"/v1/responses/{r.id}").json()
    assert deleted == {"id": r.id, "object": "response", "deleted": True}
    assert _stats(http)["num_pinned_contexts"] == pinned - 1
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    unstored = client.responses.create(model="tiny", input="Forget me", store=False, **GREEDY)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)


def test_the_store_evicts_the_oldest(client, http):
    ids = [client.responses.create(model="tiny", input=f"n{i}", **GREEDY).id for i in range(4)]
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(ids[0])
    assert client.responses.retrieve(ids[3]).id == ids[3]
    assert _stats(http)["num_pinned_contexts"] <= 3
    for i in ids[1:]:
        client.responses.delete(i)
    assert _stats(http)["num_pinned_contexts"] == 0


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"input": [{"type": "image_generation_call", "id": "x"}]}, "input", "not supported"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input",
            "text",
        ),
        ({"input": [{"type": "function_call_output", "call_id": "c1", "output": "x"}]}, "input", "call_id"),
        ({"input": "hi", "previous_response_id": "resp_nope"}, "previous_response_id", "not found"),
        ({"input": "hi " * 2000}, None, "context"),
        ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools.0.type", "function"),
        ({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x"}}}, "text", "schema"),
        ({"input": "hi", "top_logprobs": 2}, "top_logprobs", "Extra"),
    ],
)
def test_bad_input_is_a_400_in_openais_error_shape(http, body, param, words):
    r = http.post("/v1/responses", json={"model": "tiny", **body})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and words in error["message"]
    if param is not None:
        assert error["param"] == param


def test_json_schema_text_format_constrains_the_output(client):
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    }
    r = client.responses.create(
        model="tiny",
        input="Answer in JSON.",
        text={"format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}},
        temperature=0,
        max_output_tokens=40,
    )
    assert isinstance(json.loads(r.output_text)["ok"], bool)


def test_every_streamed_event_validates_against_the_sdk_schema(http):
    """Strict pydantic validation of each raw event (the SDK itself parses leniently)."""
    import typing

    from openai.types.responses import Response, ResponseStreamEvent

    union = typing.get_args(ResponseStreamEvent)[0]  # Annotated[Union[...], discriminator]
    by_type = {typing.get_args(c.model_fields["type"].annotation)[0]: c for c in typing.get_args(union)}
    for body in (
        {"input": "Hello", "max_output_tokens": 6},
        {"input": "Pick.", "tools": [TOOL], "tool_choice": "required", "max_output_tokens": 256},
    ):
        body = {"model": "tiny", "temperature": 0, "stream": True, "store": False, **body}
        with http.stream("POST", "/v1/responses", json=body) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            lines = [line for line in r.iter_lines() if line.startswith("data: ")]
        raw = [json.loads(line[len("data: ") :]) for line in lines]
        events = [by_type[e["type"]].model_validate(e) for e in raw]
        assert events[-1].type in ("response.completed", "response.incomplete")
        Response.model_validate(events[-1].response.model_dump())
        plain = http.post("/v1/responses", json={**body, "stream": False}).json()
        Response.model_validate(plain)
        assert [item["type"] for item in plain["output"]] == [i.type for i in events[-1].response.output]
