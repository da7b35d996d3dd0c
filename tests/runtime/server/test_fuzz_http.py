"""Property-based fuzzing of the HTTP API (hypothesis): arbitrary JSON bodies, mutated valid ones,
hostile scalars and the hostile classes of issue 27 (``hostile_strategies.py``: deep grammars,
backtracking and nested-repeat patterns, logprob products, malformed tool history, oversize ids) on
every endpoint get a 200 or a 4xx with a message, never a 5xx; the server answers ``/health`` after
every case, and the KV pool is whole after every test. Bounded (a few hundred cases, derandomized) so
the file stays under a minute."""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from radixlm.runtime.server.launch import launch_server
from tests.helpers import hostile_strategies as hs
from tests.runtime.server.test_native_api import assert_kv_idle

ENDPOINTS = ["/generate", "/v1/completions", "/v1/chat/completions", "/program", "/abort_request"]
FIELDS = [
    "text",
    "input_ids",
    "sampling_params",
    "rid",
    "n",
    "stream",
    "return_logprob",
    "top_logprobs_num",
    "logprob_start_len",
    "max_new_tokens",
    "temperature",
    "top_p",
    "top_k",
    "stop",
    "regex",
    "json_schema",
    "choices",
    "messages",
    "prompt",
    "max_tokens",
    "graph",
    "nodes",
    "options",
    "response_format",
    "abort_all",
    "input_segments",
    "pin_children",
    "unpin_rids",
    "seed",
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.sampled_from(["", "\ud800", "a" * 3000, "[a-z]{9999}"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(FIELDS), inner, max_size=5)
    ),
    max_leaves=12,
)
bodies = st.dictionaries(st.sampled_from(FIELDS), values, max_size=6)
SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def server(tiny_llama_dir):
    with launch_server(
        model=tiny_llama_dir,
        device="cpu",
        num_threads=1,
        kv_cache_gb=0.02,
        context_length=256,
        max_n=4,
        grammar_compile_timeout=5.0,
    ) as handle:
        yield handle


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, timeout=120) as c:
        yield c


def post(client: httpx.Client, path: str, body: dict) -> httpx.Response:
    """``body`` answered with a 200, or a 4xx whose error names the problem; ``/health`` answers after."""
    raw = json.dumps(body, allow_nan=True).encode("utf-8", "surrogatepass")
    r = client.post(path, content=raw, headers={"Content-Type": "application/json"})
    where = (path, str(body)[:300], r.status_code, r.text[:300])
    event(f"{path} -> {r.status_code}")  # --hypothesis-show-statistics: which classes got through
    assert r.status_code == 200 or 400 <= r.status_code < 500, where
    if r.status_code != 200 and r.status_code != 405:
        assert r.json()["error"]["message"], where
    assert client.get("/health").status_code == 200, where
    return r


@pytest.mark.parametrize("path", ENDPOINTS)
def test_arbitrary_bodies(client, path):
    @SETTINGS
    @given(body=bodies)
    def check(body):
        if path == "/generate" and isinstance(body.get("sampling_params"), dict):
            body["sampling_params"].setdefault("max_new_tokens", 2)
        for key in ("max_new_tokens", "max_tokens"):
            if isinstance(body.get(key), int):
                body[key] = min(body[key], 4)
        post(client, path, body)

    check()
    assert_kv_idle(client)


@SETTINGS
@given(
    params=st.fixed_dictionaries(
        {},
        optional={
            "temperature": scalars,
            "top_p": scalars,
            "top_k": scalars,
            "min_p": scalars,
            "n": st.integers(-1, 6),
            "stop": values,
            "regex": st.sampled_from(
                ["[ab]+", "(a|b)*c{2,5}", "(", "a{99999}", "", "(a{99}){99}", "((a{9}){9}){9}"]
            ),
            "stop_regex": st.sampled_from(
                ["(x+x+)+y", "(a|aa)+b", r"(a)\1", "(?=a)b", ["z"] * 40, "a" * 2000]
            ),
            "ebnf": st.integers(1, 400).map(
                lambda n: (
                    "root ::= r0\n" + "".join(f'r{i} ::= r{i + 1} "a"\n' for i in range(n)) + f'r{n} ::= "b"'
                )
            ),
            "json_schema": st.sampled_from(
                [
                    '{"type": "integer"}',
                    '{"type": "string", "maxLength": 3}',
                    '{"type": "string", "pattern": "(a{99}){99}"}',
                    "{",
                    '{"type": "object", "properties": {"a": {"type": "boolean"}}}',
                ]
            ),
            "repetition_penalty": scalars,
            "frequency_penalty": scalars,
            "seed": scalars,
            "ignore_eos": scalars,
        },
    )
)
def test_sampling_params_of_generate(client, params):
    params["max_new_tokens"] = 3
    post(client, "/generate", {"text": "ab", "sampling_params": params})


# issue 27: the classes of the second pass (tool history, template kwargs, huge ints, deep tags, ids)
tool_calls = st.one_of(
    values,
    st.lists(
        st.fixed_dictionaries(
            {},
            optional={
                "id": scalars,
                "type": scalars,
                "function": st.one_of(
                    values,
                    st.fixed_dictionaries(
                        {},
                        optional={
                            "name": scalars,
                            "arguments": st.one_of(
                                values, st.integers(1, 3000).map(lambda d: '{"a": ' * d + "1" + "}" * d)
                            ),
                        },
                    ),
                ),
            },
        ),
        max_size=3,
    ),
)
huge_ints = st.integers(2**53, 10**400) | st.integers(-(10**400), -(2**53))


@SETTINGS
@given(
    calls=tool_calls,
    template_kwargs=st.dictionaries(
        st.sampled_from(["messages", "tools", "tokenize", "eos_token", "enable_thinking", "x"]), values
    ),
    number=huge_ints,
    field=st.sampled_from(["temperature", "top_p", "seed", "top_logprobs", "max_tokens", "n"]),
    rid=st.sampled_from(["r" * 5000, "a\nb", "ok-rid"]),
)
def test_second_pass_hostile_chat(client, calls, template_kwargs, number, field, rid):
    messages = [{"role": "assistant", "content": "", "tool_calls": calls}, {"role": "user", "content": "hi"}]
    body = {"messages": messages, "max_tokens": 2, "chat_template_kwargs": template_kwargs, "rid": rid}
    post(client, "/v1/chat/completions", body)
    post(client, "/v1/chat/completions", {"messages": messages[1:], "max_tokens": 2, field: number})
    post(client, "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 2, field: number}})


@SETTINGS
@given(depth=st.integers(1, 5000), wrap=st.booleans())
def test_second_pass_deep_structural_tags(client, depth, wrap):
    nested = "[" * depth + "]" * depth
    tag = '{"type": "structural_tag", "structures": ' + nested + ', "triggers": []}' if wrap else nested
    post(client, "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 2, "structural_tag": tag}})


# ---- issue 27, the classes through their strategies (hostile_strategies.py) ----------------------------
HOSTILE = settings(SETTINGS, max_examples=12)
ROUTES = st.sampled_from(["/generate", "/v1/completions", "/v1/chat/completions"])


def on_route(path: str, grammar: dict, max_tokens: int = 2) -> dict:
    """A request carrying ``grammar`` (sampling parameters) on one of the generating routes."""
    if path == "/generate":
        return {"text": "ab", "sampling_params": {"max_new_tokens": max_tokens, **grammar}}
    if path == "/v1/completions":
        return {"prompt": "ab", "max_tokens": max_tokens, **grammar}
    return {"messages": [{"role": "user", "content": "ab"}], "max_tokens": max_tokens, **grammar}


@pytest.fixture()
def kv_whole_after(client):
    yield
    assert_kv_idle(client)


@HOSTILE
@given(path=ROUTES, ebnf=hs.deep_ebnf)
@example(path="/generate", ebnf=hs.rule_chain(3000))  # past the limits, whatever the draw
@example(path="/v1/chat/completions", ebnf=hs.nested_group(2000))
def test_deep_grammars(client, kv_whole_after, path, ebnf):
    post(client, path, on_route(path, {"ebnf": ebnf}))


@HOSTILE
@given(path=ROUTES, pattern=hs.backtracking, copies=st.integers(1, 40), as_stop=st.booleans())
@example(path="/v1/completions", pattern="(x+x+)+y", copies=32, as_stop=True)
def test_backtracking_patterns(client, kv_whole_after, path, pattern, copies, as_stop):
    grammar = {"stop_regex": [pattern] * copies} if as_stop else {"regex": pattern}
    body = on_route(path, grammar, max_tokens=4)
    body["text" if path == "/generate" else "prompt"] = "x" * 3000  # what a backtracking search scans
    if path == "/v1/chat/completions":
        body.pop("prompt")
    post(client, path, body)


BIG_PATTERN = json.dumps({"type": "string", "pattern": "(a{99}){99}"})


@HOSTILE
@given(path=ROUTES, regex=hs.nested_repeats, schema=hs.repeat_schemas, where=st.integers(0, 3))
@example(path="/generate", regex="(a{999}){999}", schema=BIG_PATTERN, where=0)
@example(path="/v1/chat/completions", regex="a", schema=BIG_PATTERN, where=3)
def test_nested_repeats(client, kv_whole_after, path, regex, schema, where):
    grammar = [
        {"regex": regex},
        {"stop_regex": regex},
        {"json_schema": schema},
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "s", "schema": json.loads(schema)},
            }
        }
        if path != "/generate"
        else {"json_schema": schema},
    ][where]
    post(client, path, on_route(path, grammar))


@HOSTILE
@given(native=hs.logprob_requests, openai=hs.openai_logprobs)
@example(
    native={
        "text": "ab" * 230,
        "return_logprob": True,
        "top_logprobs_num": 20,
        "logprob_start_len": 0,
        "sampling_params": {"max_new_tokens": 3},
    },
    openai={"logprobs": 20, "echo": False, "prompt": "ab" * 200},
)
def test_logprob_products(client, kv_whole_after, native, openai):
    post(client, "/generate", native)
    post(client, "/v1/completions", {**openai, "max_tokens": 2})


@HOSTILE
@given(
    messages=hs.tool_histories,
    tools=st.booleans(),
    choice=st.sampled_from([None, "auto", "required", "none"]),
    stream=st.booleans(),
)
def test_malformed_tool_history(client, kv_whole_after, messages, tools, choice, stream):
    body: dict = {"messages": messages, "max_tokens": 3, "stream": stream}
    if tools:
        body["tools"] = [
            {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
        ]
    if choice is not None:
        body["tool_choice"] = choice
    post(client, "/v1/chat/completions", body)


@HOSTILE
@given(rid=hs.oversize_ids, path=ROUTES, session=st.booleans())
def test_oversize_ids(client, kv_whole_after, rid, path, session):
    if session:
        r = post(client, "/open_session", {"session_id": rid})
        if r.status_code == 200:
            turn = {"text": "ab", "sampling_params": {"max_new_tokens": 1}, "session_params": {"id": rid}}
            post(client, "/generate", turn)
            post(client, "/close_session", {"session_id": rid})
        return
    post(client, path, {**on_route(path, {}, max_tokens=1), "rid": rid})
