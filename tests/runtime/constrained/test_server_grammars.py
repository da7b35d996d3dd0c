"""Grammars through the real server path (HTTP /generate, /v1/chat/completions) on a tiny random model:
keyword-naming 400s, ebnf and structural_tag, and a slow schema that does not starve a quick one."""

from __future__ import annotations

import json
import re
import threading
import time

import httpx
import openai
import pytest

from radixlm.runtime.server.launch import launch_server
from tests.runtime.constrained.test_compile_pool import SLOW_FOR_OUTLINES

GREEDY = {"temperature": 0, "max_new_tokens": 8}
TAG = {
    "type": "structural_tag",
    "triggers": ["<f"],
    "structures": [{"begin": "<f>", "schema": {"type": "integer"}, "end": "</f>"}],
}
SLOW_TIMEOUT_S = 20


def _server(tiny_llama_dir, **kwargs):
    return launch_server(
        model=tiny_llama_dir,
        device="cpu",
        num_threads=1,
        kv_cache_gb=0.02,
        context_length=512,
        served_model_name="tiny",
        **kwargs,
    )


@pytest.fixture(scope="module")
def llg_server(tiny_llama_dir):
    with _server(tiny_llama_dir) as handle:
        yield handle


@pytest.fixture(scope="module")
def outlines_server(tiny_llama_dir):
    with _server(
        tiny_llama_dir,
        grammar_backend="outlines",
        grammar_compile_timeout=SLOW_TIMEOUT_S,
        grammar_max_concurrent_compiles=1,
    ) as handle:
        yield handle


def generate(url: str, params: dict, text: str = "hello") -> httpx.Response:
    return httpx.post(
        url + "/generate", json={"text": text, "sampling_params": {**GREEDY, **params}}, timeout=120
    )


@pytest.mark.parametrize(
    "schema, keyword",
    [
        ({"not": {"type": "string"}}, "not"),
        ({"propertyNames": {"maxLength": 2}}, "propertyNames"),
        ({"contains": {"type": "integer"}, "maxContains": 2}, "maxContains"),
    ],
)
def test_unsupported_keyword_is_a_400_naming_it(llg_server, schema, keyword):
    r = generate(llg_server.url, {"json_schema": schema})
    assert r.status_code == 400 and f'\\"{keyword}\\"' in r.text, r.text


def test_schemas_outlines_rejects_work_by_default(llg_server):
    for schema in (
        {"minimum": 1.1},
        {"type": "number", "exclusiveMaximum": 3},
        {"type": "integer", "multipleOf": 5},
        {"if": {"type": "string"}, "then": {"maxLength": 3}},
    ):
        r = generate(llg_server.url, {"json_schema": schema, "max_new_tokens": 12})
        assert r.status_code == 200, r.text


def test_ebnf_and_structural_tag_on_both_backends(llg_server, outlines_server):
    for url in (llg_server.url, outlines_server.url):
        out = generate(url, {"ebnf": 'root ::= ("cat" | "dog") "-" [0-9]'}).json()
        assert re.fullmatch("(cat|dog)-[0-9]", out["text"]), out
        r = generate(url, {"structural_tag": TAG, "max_new_tokens": 16})
        assert r.status_code == 200, r.text
        for region in re.findall(r"<f>(.*?)</f>", r.json()["text"], re.S):
            assert isinstance(json.loads(region), int)
        r = generate(url, {"structural_tag": {**TAG, "triggers": ["<g"]}})
        assert r.status_code == 400 and "triggers" in r.text, r.text


def test_openai_structural_tag_response_format(llg_server):
    oai = openai.OpenAI(base_url=llg_server.url + "/v1", api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": "hi"}]
    r = oai.chat.completions.create(
        model="tiny", messages=messages, max_tokens=8, temperature=0, response_format=TAG
    )
    assert r.choices[0].finish_reason in ("stop", "length")
    with pytest.raises(openai.BadRequestError, match="structures"):
        oai.chat.completions.create(
            model="tiny", messages=messages, max_tokens=4, response_format={**TAG, "structures": []}
        )
    r = oai.chat.completions.create(
        model="tiny",
        messages=messages,
        max_tokens=8,
        temperature=0,
        extra_body={"ebnf": 'root ::= "yes" | "no"'},
    )
    assert r.choices[0].message.content in ("yes", "no")


def test_slow_schema_does_not_starve_a_quick_one(outlines_server):
    """Two compiles outlines-core cannot finish, then a quick grammar: it is served while they still
    compile, and they end at the deadline with a 400."""
    assert generate(outlines_server.url, {"regex": "[ab]{2}"}).status_code == 200  # a warm worker
    results: dict[str, tuple[float, httpx.Response]] = {}
    start = time.monotonic()

    def send(name: str, params: dict) -> None:
        response = generate(outlines_server.url, params)
        results[name] = (time.monotonic() - start, response)

    slow = [SLOW_FOR_OUTLINES, SLOW_FOR_OUTLINES.replace('"foo"', '"baz"')]  # two distinct compiles
    threads = [
        threading.Thread(target=send, args=(f"slow{i}", {"json_schema": schema}))
        for i, schema in enumerate(slow)
    ]
    for t in threads:
        t.start()
    time.sleep(0.5)
    quick = threading.Thread(target=send, args=("quick", {"regex": "[0-9]{3}"}))
    quick.start()
    for t in [*threads, quick]:
        t.join()
    quick_at, quick_response = results["quick"]
    assert quick_response.status_code == 200 and re.fullmatch("[0-9]{3}", quick_response.json()["text"])
    for name in ("slow0", "slow1"):
        at, response = results[name]
        assert response.status_code == 400 and "timed out" in response.text, response.text
        assert at >= SLOW_TIMEOUT_S * 0.9 and quick_at < at
    assert quick_at < SLOW_TIMEOUT_S / 2, f"the quick grammar took {quick_at:.1f} s"
