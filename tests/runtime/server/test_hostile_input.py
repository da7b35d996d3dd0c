"""Hostile requests (issue 13) against a live server on a tiny random model: each gets a 4xx naming
the problem, and the server keeps serving with every KV slot back in the pool."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from radixlm.runtime.server.launch import launch_server
from tests.runtime.server.test_native_api import assert_kv_idle

GREEDY = {"temperature": 0, "max_new_tokens": 4}
JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def server(tiny_llama_dir):
    with launch_server(
        model=tiny_llama_dir,
        device="cpu",
        num_threads=1,
        kv_cache_gb=0.02,
        context_length=512,
        max_request_bytes=300_000,
        max_n=8,
        max_program_nodes=16,
        max_running_requests=1,
        max_queued_requests=0,
        allowed_origins="http://allowed.example",
    ) as handle:
        yield handle


@pytest.fixture()
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c
        still_serving(c)


def still_serving(client: httpx.Client) -> None:
    r = client.post("/generate", json={"text": "ok", "sampling_params": GREEDY})
    assert r.status_code == 200, r.text
    assert client.get("/health").status_code == 200
    assert_kv_idle(client)


def post_raw(client: httpx.Client, path: str, raw: str) -> httpx.Response:
    return client.post(path, content=raw.encode("utf-8", "surrogatepass"), headers=JSON)


def assert_400(r: httpx.Response, *words: str) -> dict:
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    for word in words:
        assert word in err["message"] or word == err["param"], err
    return err


@pytest.mark.parametrize(
    "raw, field",
    [
        ('{"text": "hi", "sampling_params": {"temperature": NaN}}', "sampling_params.temperature"),
        ('{"text": "hi", "sampling_params": {"temperature": Infinity}}', "sampling_params"),
        ('{"text": "hi", "sampling_params": {"top_p": 1e999}}', "sampling_params"),
        ('{"text": "hi \\ud800", "sampling_params": {}}', "text"),
        ('{"text": "hi", "rid": "\\udc00x", "sampling_params": {}}', "rid"),
    ],
)
def test_non_finite_numbers_and_lone_surrogates(client, raw, field):
    assert_400(post_raw(client, "/generate", raw), field)


def test_body_nested_100k_levels(client):
    raw = '{"text": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert_400(post_raw(client, "/generate", raw), "nested")


def test_oversized_body_413(client):
    r = client.post("/generate", json={"text": "x" * 400_000, "sampling_params": GREEDY})
    assert r.status_code == 413 and "max-request-bytes" in r.json()["error"]["message"]


def test_top_logprobs_beyond_vocabulary(client):
    r = client.post(
        "/generate",
        json={"text": "hi", "return_logprob": True, "top_logprobs_num": 10**6, "sampling_params": GREEDY},
    )
    assert_400(r, "top_logprobs_num")


def test_n_in_the_tens_of_thousands(client):
    assert_400(client.post("/generate", json={"text": "hi", "sampling_params": {**GREEDY, "n": 20000}}), "n")


def test_deep_json_schema(client):
    schema = {"type": "object"}
    for _ in range(300):
        schema = {"type": "object", "properties": {"a": schema}}
    params = {**GREEDY, "json_schema": json.dumps(schema)}
    r = client.post("/generate", json={"text": "hi", "sampling_params": params})
    assert_400(r, "json_schema", "nested")


def test_infinite_minimum_in_schema(client):
    schema = '{"type": "integer", "minimum": Infinity}'
    assert_400(
        client.post("/generate", json={"text": "hi", "sampling_params": {"json_schema": schema}}),
        "json_schema",
    )
    raw = (
        '{"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", '
        '"json_schema": {"name": "x", "schema": {"type": "integer", "minimum": Infinity}}}}'
    )
    assert post_raw(client, "/v1/chat/completions", raw).status_code == 400


def test_oversized_regex(client):
    r = client.post("/generate", json={"text": "hi", "sampling_params": {"regex": "a" * 70_000}})
    assert r.status_code in (400, 413)


def graph(nodes):
    return {"graph": {"version": 1, "name": "g", "nodes": nodes}}


def test_program_cycle_is_refused_and_does_not_stall(client):
    nodes = [
        {"id": 0, "parent": 1, "extend": [], "op": None},
        {"id": 1, "parent": 0, "extend": [{"text": "x"}], "op": {"type": "prefill"}},
    ]
    assert_400(client.post("/program", json=graph(nodes)), "graph", "parent")


def test_program_options_as_list(client):
    nodes = [
        {
            "id": 0,
            "parent": None,
            "extend": [{"text": "x"}],
            "op": {"type": "gen", "name": "a", "options": [1, 2]},
        }
    ]
    assert_400(client.post("/program", json=graph(nodes)), "options")


def test_program_too_many_nodes(client):
    nodes = [{"id": i, "parent": None, "extend": [{"text": "x"}], "op": None} for i in range(17)]
    assert_400(client.post("/program", json=graph(nodes)), "limit")


def test_browser_simple_requests_refused(client):
    body = json.dumps({"text": "hi", "sampling_params": GREEDY})
    r = client.post("/generate", content=body, headers={"Content-Type": "text/plain"})
    assert r.status_code == 415
    r = client.post("/abort_request", json={"abort_all": True}, headers={"Origin": "http://evil.example"})
    assert r.status_code == 403
    r = client.post("/flush_cache", headers={"Host": "evil.example:30000"})
    assert r.status_code == 421


def test_allowed_origin_gets_cors(client):
    r = client.options(
        "/generate", headers={"Origin": "http://allowed.example", "Access-Control-Request-Method": "POST"}
    )
    assert r.status_code == 204 and r.headers["access-control-allow-origin"] == "http://allowed.example"
    r = client.post(
        "/generate",
        json={"text": "hi", "sampling_params": GREEDY},
        headers={"Origin": "http://allowed.example"},
    )
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://allowed.example"


def test_full_server_answers_503_with_retry_after(server, client):
    first_chunk = threading.Event()

    def long_stream() -> None:
        body = {"text": "a", "stream": True, "sampling_params": {"max_new_tokens": 400, "ignore_eos": True}}
        with httpx.Client(base_url=server.url, timeout=120) as c:
            with c.stream("POST", "/generate", json=body) as r:
                for _ in r.iter_lines():
                    first_chunk.set()

    t = threading.Thread(target=long_stream)
    t.start()
    assert first_chunk.wait(60)
    r = client.post("/generate", json={"text": "hi", "sampling_params": GREEDY})
    t.join()
    assert r.status_code == 503 and r.headers["retry-after"] == "1", r.text


@pytest.mark.parametrize(
    "params",
    [
        {"regex": "a{99999}"},
        {"regex": "(ab){2,50000}"},
        {"json_schema": '{"type": "string", "maxLength": 1000000}'},
    ],
)
def test_exploding_repetition_counts(client, params):
    err = assert_400(client.post("/generate", json={"text": "hi", "sampling_params": params}))
    assert err["param"] in params and "4096" in err["message"]
