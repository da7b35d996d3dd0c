"""Constrained decoding over HTTP on a tiny random model: bad grammars are a 400, the server keeps serving."""

from __future__ import annotations

import json
import re

import httpx
import openai
import pytest

from radixlm.runtime.server.launch import launch_server

GREEDY = {"temperature": 0, "max_new_tokens": 8}
BAD_GRAMMARS = [
    ({"regex": "[a-z"}, "regex"),
    ({"regex": r"(?<=a)b"}, "look-around"),
    ({"json_schema": "{not json"}, "JSON"),
    ({"json_schema": json.dumps({"not": {"type": "string"}})}, "unsupported"),
    (
        {"json_schema": json.dumps({"type": "integer", "minimum": 9, "maximum": 1})},
        "range|minimum .9. is greater than maximum .1.",
    ),
]


@pytest.fixture(scope="module")
def server(tiny_llama_dir):
    with launch_server(
        model=tiny_llama_dir,
        device="cpu",
        num_threads=1,
        kv_cache_gb=0.02,
        context_length=512,
        debug_invariants=True,
        served_model_name="tiny",
    ) as handle:
        yield handle


@pytest.fixture()
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


@pytest.fixture()
def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def assert_serves(client: httpx.Client) -> None:
    r = client.post("/generate", json={"text": "ab", "sampling_params": {**GREEDY, "regex": "[xy]{3}"}})
    assert r.status_code == 200 and re.fullmatch("[xy]{3}", r.json()["text"])


@pytest.mark.parametrize("params, words", BAD_GRAMMARS)
def test_native_bad_grammar_is_400(client, params, words):
    r = client.post("/generate", json={"text": "hello", "sampling_params": {**GREEDY, **params}})
    assert r.status_code == 400, r.text
    assert re.search(words.lower(), r.text.lower())
    assert_serves(client)


def test_native_constraints_hold(client):
    cases = [
        ({"regex": "(cat|dog)-[0-9]{2}"}, lambda t: re.fullmatch("(cat|dog)-[0-9]{2}", t)),
        ({"choices": ["alpha", "beta"]}, lambda t: t in ("alpha", "beta")),
        ({"dtype": "bool"}, lambda t: t in ("True", "False")),
    ]
    for params, ok in cases:
        out = client.post("/generate", json={"text": "x", "sampling_params": {**GREEDY, **params}}).json()
        if out["meta_info"]["finish_reason"]["type"] == "stop":
            assert ok(out["text"]), out["text"]


def test_openai_bad_grammar_is_400(oai, client):
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.BadRequestError, match="(?i)regex"):
        oai.chat.completions.create(model="tiny", messages=messages, max_tokens=4, extra_body={"regex": "(a"})
    with pytest.raises(openai.BadRequestError, match="(?i)unsupported"):
        oai.chat.completions.create(
            model="tiny",
            messages=messages,
            max_tokens=4,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"not": {"type": "string"}}},
            },
        )
    with pytest.raises(openai.BadRequestError, match="(?i)look-around"):
        oai.completions.create(model="tiny", prompt="hi", max_tokens=4, extra_body={"regex": "a(?=b)"})
    r = oai.chat.completions.create(
        model="tiny", messages=messages, max_tokens=6, temperature=0, extra_body={"regex": "[ab]{3}"}
    )
    assert re.fullmatch("[ab]{3}", r.choices[0].message.content)
    assert_serves(client)
