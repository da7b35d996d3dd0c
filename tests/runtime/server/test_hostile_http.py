"""Hostile requests, second pass (issue 27, the HTTP side), against a live server on a tiny random
model: 500s that are the client's fault answer 400/413, requests that can never run are not told to
retry, one client cannot touch another's session turns or pins, state changes need POST, slow
sockets are cut off, large work leaves the event loop free, and cut-off tool calls are no calls."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest

from radixlm.runtime.server.function_call.constraints import MAX_PARALLEL_TOOL_CALLS
from radixlm.runtime.server.launch import launch_server
from tests.runtime.server.test_native_api import assert_kv_idle

GREEDY = {"temperature": 0, "max_new_tokens": 3}
USER = [{"role": "user", "content": "hi"}]
CAPACITY = 6  # max_running_requests + max_queued_requests
MAX_CONNECTIONS = 8
HEADER_TIMEOUT = 1.0
BODY_TIMEOUT = 2.0


@pytest.fixture(scope="module")
def server(tiny_llama_dir):
    with launch_server(
        model=tiny_llama_dir,
        device="cpu",
        num_threads=1,
        kv_cache_gb=0.02,
        context_length=512,
        max_running_requests=2,
        max_queued_requests=CAPACITY - 2,
        max_sessions=4,
        max_connections=MAX_CONNECTIONS,
        header_timeout=HEADER_TIMEOUT,
        body_timeout=BODY_TIMEOUT,
        timeout_keep_alive=1.0,
    ) as handle:
        yield handle


@pytest.fixture()
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c
    with httpx.Client(base_url=server.url, timeout=60) as c:  # a fresh connection: still serving
        r = c.post("/generate", json={"text": "ok", "sampling_params": GREEDY})
        assert r.status_code == 200, r.text
        assert_kv_idle(c)


def post(client: httpx.Client, path: str, body: dict | str) -> httpx.Response:
    if isinstance(body, str):
        return client.post(path, content=body.encode(), headers={"Content-Type": "application/json"})
    return client.post(path, json=body)


def assert_status(r: httpx.Response, status: int, *words: str) -> None:
    assert r.status_code == status, r.text
    assert "retry-after" not in r.headers
    message = r.json()["error"]["message"]
    for word in words:
        assert word in message, message


def deep_json(levels: int) -> str:
    return '{"a": ' * levels + "1" + "}" * levels


# ---- class 8: 500s that are 400s ------------------------------------------------------------------
def _assistant_calls(calls: object) -> dict:
    return {"messages": [{"role": "assistant", "content": "", "tool_calls": calls}, *USER], "max_tokens": 2}


@pytest.mark.parametrize(
    "calls",
    [
        "not a list",
        [1, 2],
        [{"id": "x"}],
        [{"type": "function", "function": {"name": 7, "arguments": "{}"}}],
        [{"type": "function", "function": {"name": "f", "arguments": 5}}],
        [{"type": "function", "function": {"name": "f", "arguments": deep_json(3000)}}],
    ],
)
def test_malformed_tool_calls_in_history(client, calls):
    assert_status(post(client, "/v1/chat/completions", _assistant_calls(calls)), 400, "tool_calls")


@pytest.mark.parametrize("name", ["messages", "tools", "add_generation_prompt", "tokenize", "eos_token"])
def test_chat_template_kwargs_colliding_with_template_variables(client, name):
    body = {"messages": USER, "max_tokens": 2, "chat_template_kwargs": {name: []}}
    assert_status(post(client, "/v1/chat/completions", body), 400, name)


@pytest.mark.parametrize(
    "field, value",
    [("temperature", "9" * 400), ("top_p", "1" + "0" * 400), ("min_p", "-" + "9" * 400)]
    + [("top_k", "9" * 40), ("max_new_tokens", "9" * 40), ("seed", "9" * 40), ("n", "9" * 400)],
)
def test_integers_too_large_for_their_parameter(client, field, value):
    raw = f'{{"text": "hi", "sampling_params": {{"{field}": {value}}}}}'
    assert_status(post(client, "/generate", raw), 400, field)


@pytest.mark.parametrize(
    "tag",
    [
        "[" * 5000 + "]" * 5000,
        '{"type": "structural_tag", "structures": ' + deep_json(2000) + ', "triggers": []}',
    ],
)
def test_deeply_nested_structural_tag(client, tag):
    assert_status(post(client, "/generate", {"text": "hi", "sampling_params": {"structural_tag": tag}}), 400)


def _select_graph(choices: int) -> dict:
    op = {
        "type": "select",
        "name": "a",
        "choices": [f"c{i}" for i in range(choices)],
        "method": "token_length_normalized",
    }
    node = {"id": 0, "parent": None, "extend": [{"text": "x"}], "op": op}
    return {"graph": {"version": 1, "name": "g", "nodes": [node]}}


@pytest.mark.parametrize(
    "path, body",
    [
        ("/generate", {"text": ["hi"] * 10_000, "sampling_params": GREEDY}),
        ("/generate", {"text": ["hi"] * (CAPACITY + 1), "sampling_params": GREEDY}),
        ("/generate", {"text": "hi", "sampling_params": {**GREEDY, "n": CAPACITY + 1}}),
        ("/v1/completions", {"prompt": ["hi"] * (CAPACITY + 1), "max_tokens": 1}),
        ("/program", _select_graph(3000)),
    ],
)
def test_requests_that_can_never_be_admitted_are_413_not_503(client, path, body):
    assert_status(post(client, path, body), 413, "at most")


# ---- class 10: security ---------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/flush_cache", "/open_session", "/close_session", "/abort_request"])
def test_state_changing_endpoints_refuse_get(client, path):
    assert client.get(path).status_code == 405


@pytest.mark.parametrize(
    "path, body, field",
    [
        ("/generate", {"text": "hi", "rid": "r" * 10_000, "sampling_params": GREEDY}, "rid"),
        ("/v1/chat/completions", {"messages": USER, "rid": "r" * 300, "max_tokens": 1}, "rid"),
        ("/open_session", {"session_id": "s" * 5_000_000}, "session_id"),
        ("/open_session", {"session_id": "s\n1"}, "session_id"),
        ("/generate", {"text": "hi", "pin_children": 3, "sampling_params": GREEDY}, "pin_children"),
        (
            "/generate",
            {"text": "hi", "unpin_rids": ["someone-else"], "sampling_params": GREEDY},
            "unpin_rids",
        ),
        ("/generate", {"text": ["a", "b"], "unpin_rids": [["x"], None], "sampling_params": GREEDY}, "unpin"),
    ],
)
def test_ids_are_capped_and_pins_are_the_servers(client, path, body, field):
    r = post(client, path, body)
    assert r.status_code in (400, 413), r.text
    assert field in r.text


@pytest.mark.parametrize("options", [{"max_tokens": 3}, {"temprature": 0}, {"pin_children": 2}])
def test_program_unknown_gen_options(client, options):
    node = {
        "id": 0,
        "parent": None,
        "extend": [{"text": "x"}],
        "op": {"type": "gen", "name": "a", "options": options},
    }
    r = post(client, "/program", {"graph": {"version": 1, "name": "g", "nodes": [node]}})
    assert_status(r, 400, next(iter(options)))


# ---- class 7: a session's turns are its own -------------------------------------------------------
def _turn(client: httpx.Client, sid: str, rid: str, parent: str | None, text: str, **extra) -> dict:
    body = {"text": text, "rid": rid, "sampling_params": GREEDY, "session_params": {"id": sid, "rid": parent}}
    r = post(client, "/generate", {**body, **extra})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("intruder", ["plain request", "other session's turn"])
def test_reusing_a_finished_turns_rid_does_not_rewrite_the_session(client, intruder):
    sid = post(client, "/open_session", {"capacity_of_str_len": 400}).json()
    rid = f"turn-{intruder[:5]}"
    first = _turn(client, sid, rid, None, "The first turn.")
    if intruder == "plain request":
        r = post(client, "/generate", {"text": "zzzz", "rid": rid, "sampling_params": {"max_new_tokens": 1}})
        assert r.status_code == 200, r.text
    else:
        other = post(client, "/open_session", {}).json()
        _turn(client, other, rid, None, "qqqq", sampling_params={"max_new_tokens": 1})
        post(client, "/close_session", {"session_id": other})
    second = _turn(client, sid, "next", rid, " More.", return_logprob=True, logprob_start_len=0)
    prompt = [entry[1] for entry in second["meta_info"]["input_token_logprobs"]]
    first_prompt = client.post("/v1/tokenize", json={"prompt": "The first turn."}).json()["tokens"]
    new = client.post("/v1/tokenize", json={"prompt": " More.", "add_special_tokens": False}).json()["tokens"]
    assert prompt == first_prompt + first["output_ids"] + new
    post(client, "/close_session", {"session_id": sid})


# ---- class 9: sockets -----------------------------------------------------------------------------
def _connect(server) -> socket.socket:
    host, port = server.url.split("//")[1].rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=30)
    return sock


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """The server closed the socket (maybe after a response) before ``seconds`` passed."""
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
        return True
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


@pytest.mark.parametrize("partial", [b"", b"POST /generate HTTP/1.1\r\n", b"GET /health HTTP/1.1\r\nHost: a"])
def test_slow_headers_are_cut_off(server, client, partial):
    socks = [_connect(server) for _ in range(3)]
    for sock in socks:
        sock.sendall(partial)
    assert all(_closed_within(sock, HEADER_TIMEOUT + 5) for sock in socks)
    for sock in socks:
        sock.close()


@pytest.mark.parametrize("chunked", [True, False])
def test_trickled_or_endless_bodies_get_408(server, client, chunked):
    sock = _connect(server)
    length = b"Transfer-Encoding: chunked" if chunked else b"Content-Length: 100000"
    sock.sendall(
        b"POST /generate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        + length
        + b"\r\n\r\n"
    )
    received = b""
    sock.settimeout(0.2)
    deadline = time.monotonic() + BODY_TIMEOUT + 10
    while time.monotonic() < deadline and b"\r\n\r\n" not in received:
        try:
            sock.sendall(b"1\r\n \r\n" if chunked else b" ")
            received += sock.recv(65536)
        except TimeoutError:
            continue
        except (BrokenPipeError, ConnectionResetError):
            break
    sock.close()
    assert received.startswith(b"HTTP/1.1 408"), received[:200]


def test_connections_beyond_the_limit_are_closed(server, client):
    socks = [_connect(server) for _ in range(MAX_CONNECTIONS + 4)]
    closed = [_closed_within(sock, 0.5) for sock in socks]
    assert sum(closed) >= 4  # the excess at once (idle ones go after the header timeout)
    for sock in socks:
        sock.close()


# ---- class 5: large work off the event loop -------------------------------------------------------
def test_health_answers_while_a_large_detokenize_runs(server, client):
    tokens = [[65 + i % 26 for i in range(40_000)] for _ in range(40)]
    result: dict = {}
    body_sent = threading.Event()

    def trace(event: str, info: dict) -> None:
        if event == "http11.send_request_body.complete":
            body_sent.set()
        elif event == "http11.receive_response_headers.complete":
            result["answered"] = time.monotonic()  # the server's work on it is done

    def detokenize() -> None:
        with httpx.Client(base_url=server.url, timeout=120) as c:
            result["r"] = c.post("/v1/detokenize", json={"tokens": tokens}, extensions={"trace": trace})

    t = threading.Thread(target=detokenize)
    t.start()
    assert body_sent.wait(60)
    answered = []  # (sent, answered): health checks sent once the large request was on its way
    while t.is_alive():
        sent = time.monotonic()
        r = client.get("/health")
        answered.append((sent, time.monotonic(), r.status_code))
    t.join()
    assert result["r"].status_code == 200 and len(result["r"].json()["text"]) == 40
    # the event loop stayed free: health checks were answered while the server parsed and decoded
    assert sum(at < result["answered"] and status == 200 for _, at, status in answered) >= 2


def test_tokenize_refuses_prompts_longer_than_the_context_allows(client):
    r = post(client, "/v1/tokenize", {"prompt": ["short", "x" * 280_000]})
    assert r.status_code == 400 and "characters" in r.text
    r = post(client, "/v1/tokenize", {"prompt": ["abc", "de"]})
    assert r.json()["count"] == [3, 2]


# ---- class 11: tool calls under tool_choice="required" --------------------------------------------
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


@pytest.mark.parametrize("max_tokens", [8, 19, 33, 60, 200])
@pytest.mark.parametrize("stream", [False, True])
def test_required_parallel_calls_never_return_a_cut_off_call(client, max_tokens, stream):
    body = {
        "messages": USER,
        "tools": TOOLS,
        "tool_choice": "required",
        "max_tokens": max_tokens,
        "temperature": 1.0,
        "seed": max_tokens,
        "stream": stream,
    }
    if not stream:
        r = post(client, "/v1/chat/completions", body)
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        calls, reason = choice["message"].get("tool_calls") or [], choice["finish_reason"]
    else:
        with client.stream("POST", "/v1/chat/completions", json=body) as r:
            chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
        reason = chunks[-1]["choices"][0]["finish_reason"]
        calls = []
        for chunk in chunks:
            for delta in chunk["choices"][0]["delta"].get("tool_calls") or []:
                if delta.get("id"):
                    calls.append({"function": {"name": delta["function"]["name"], "arguments": ""}})
                calls[delta["index"]]["function"]["arguments"] += delta["function"].get("arguments", "")
        if reason == "length" and calls:
            calls = calls[:-1] if not _parses(calls[-1]["function"]["arguments"]) else calls
    assert len(calls) <= MAX_PARALLEL_TOOL_CALLS
    for call in calls:
        assert call["function"]["name"] == "get_weather"
        assert _parses(call["function"]["arguments"]), call
    assert reason in ("tool_calls", "length")
    if reason == "tool_calls":
        assert calls


def _parses(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except json.JSONDecodeError:
        return False
