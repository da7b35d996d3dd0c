"""Property-based fuzzing of the HTTP API (hypothesis): arbitrary JSON bodies, mutated valid ones and
hostile scalars on every endpoint never get a 5xx, the server answers after every case, and the KV
pool is whole at the end. Bounded (a few hundred cases) so CI stays fast."""

from __future__ import annotations

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from radixlm.runtime.server.launch import launch_server
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


def post(client: httpx.Client, path: str, body: dict) -> None:
    import json

    raw = json.dumps(body, allow_nan=True).encode("utf-8", "surrogatepass")
    r = client.post(path, content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code < 500 or r.status_code == 503, (path, body, r.status_code, r.text[:300])
    assert client.get("/health").status_code == 200


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
