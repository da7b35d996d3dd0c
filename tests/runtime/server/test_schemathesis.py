"""schemathesis against a live server, from the server's own OpenAPI document.

For every operation, bodies (and path parameters) that match the document and bodies that break it:
no 5xx but a 503 (admission), only documented status codes, schema-breaking bodies refused with a 4xx
(the document is not stricter than the server), the server answering ``/health`` after each case,
and every KV slot returned at the end. Bounded: a few cases per operation and mode, derandomized.
Beside the document's own cases, valid bodies of the generating operations carry the hostile
classes of issue 27 (``hostile_strategies.py``): never a 5xx, only documented statuses.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import negative_data_rejection, status_code_conformance
from schemathesis.generation import GenerationMode

from radixlm.runtime.server.launch import launch_server
from tests.helpers import hostile_strategies as hs
from tests.helpers.kv_ownership import assert_server_kv_returned

EXAMPLES_PER_MODE = 6
TOKEN_CAP = 3  # generated tokens per sample, so the run stays short
# most bodies there are refused
GENERATING = ("/generate", "/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/messages")
PROFILE_DIR = tempfile.mkdtemp(prefix="radixlm-fuzz-profile-")
TOKEN_FIELDS = ("max_new_tokens", "max_tokens", "max_completion_tokens", "max_output_tokens")


@pytest.fixture(scope="module")
def server(tiny_llama_dir):
    with launch_server(
        model=tiny_llama_dir,
        device="cpu",
        num_threads=1,
        kv_cache_gb=0.02,
        context_length=256,
        max_n=3,
        max_sessions=4,
        grammar_compile_timeout=5.0,
        enable_metrics=True,
    ) as handle:
        yield handle


@pytest.fixture(scope="module")
def api(server):
    return schemathesis.openapi.from_url(server.url + "/openapi.json")


def cap_tokens(value: Any) -> None:
    """Cap every token count in a body (in place); a sampling-params object without one gets one."""
    if isinstance(value, list):
        for item in value:
            cap_tokens(item)
        return
    if not isinstance(value, dict):
        return
    for key in TOKEN_FIELDS:
        count = value.get(key)
        if isinstance(count, int) and not isinstance(count, bool) and count > TOKEN_CAP:
            value[key] = TOKEN_CAP
    for child in value.values():
        cap_tokens(child)


# Valid by the document, refused by this server: the tiny model has no fill-in-the-middle tokens and
# custom logit processors are off. Left in, every positive completion drew one of them and got 400.
# Likewise the tiny embedder has no Matryoshka dimensions.
REFUSED_HERE = {
    "/v1/completions": ("suffix", "custom_logit_processor"),
    "/v1/embeddings": ("dimensions",),
    "/encode": ("dimensions",),
    "/classify": ("dimensions",),
    "/v1/classify": ("dimensions",),
}


def bound_body(case: Any, mode: GenerationMode) -> None:
    body = case.body
    if not isinstance(body, dict):
        return
    cap_tokens(body)
    if mode is GenerationMode.POSITIVE:
        for field in REFUSED_HERE.get(case.operation.path, ()):
            body.pop(field, None)
    if case.operation.path in ("/v1/completions", "/v1/chat/completions"):
        body.setdefault("max_tokens", TOKEN_CAP)
    if case.operation.path == "/start_profile" and "output_dir" in body:  # not a directory of the repo
        body["output_dir"] = PROFILE_DIR
    if case.operation.path == "/v1/responses":
        body.setdefault("max_output_tokens", TOKEN_CAP)
    params = body.get("sampling_params")
    for p in params if isinstance(params, list) else [params]:
        if isinstance(p, dict):
            p.setdefault("max_new_tokens", TOKEN_CAP)


def operations(api: Any) -> list[Any]:
    return [result.ok() for result in api.get_all_operations()]


def fuzz(operation: Any, mode: GenerationMode, url: str, failures: list[str], statuses: Counter) -> None:
    examples = EXAMPLES_PER_MODE * (3 if operation.path in GENERATING else 1)

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        bound_body(case, mode)
        response = case.call(base_url=url, timeout=120)
        status = response.status_code
        statuses[(operation.label, mode.value, status)] += 1
        assert status < 500 or status == 503, (status, response.text[:300])
        case.validate_response(response, checks=[status_code_conformance, negative_data_rejection])
        assert httpx.get(url + "/health", timeout=30).status_code == 200, "server down after the case"

    try:
        run()
    except Unsatisfiable:
        assert mode is GenerationMode.NEGATIVE, f"{operation.label}: no valid case can be generated"
    except BaseException as e:  # one operation's failure must not hide the others' (FailureGroup)
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        failures.append(f"{operation.label} [{mode.value}]: {type(e).__name__}: {str(e)[:1500]}")


# What the fuzzing found, each fixed; they run first, on the same server.
FOUND = [
    # a list as session id: TypeError (unhashable) -> 500
    ("/generate", {"text": "a", "session_params": {"id": [1]}}, 400, "session_params"),
    ("/generate", {"text": "a", "session_params": {"id": "s", "rid": {}}}, 400, "session_params"),
    # accepted by truthiness though the document says boolean / string
    ("/abort_request", {"abort_all": "yes"}, 400, "abort_all"),
    ("/abort_request", {"abort_all": True, "rid": ""}, 400, "rid"),
    ("/open_session", {"session_id": 0}, 400, "session_id"),
    ("/separate_reasoning", {"text": "<think>a</think>b", "reasoning_parser": 0}, 400, "reasoning_parser"),
    (
        "/generate",
        {"text": "a", "sampling_params": {"max_new_tokens": 1, "ignore_eos": "no"}},
        400,
        "sampling_params",
    ),
    (
        "/generate",
        {"text": "a", "sampling_params": {"max_new_tokens": 1, "logit_bias": {" 5": 1}}},
        400,
        "sampling_params",
    ),
    ("/generate", {"text": "a", "image_data": 0}, 400, "image_data"),  # 0 == False let it through as "unset"
    # echo decoded the ids before they were checked: OverflowError -> 500
    ("/v1/completions", {"prompt": [-5], "echo": True, "max_tokens": 1}, 400, "input_ids"),
    ("/v1/completions", {"prompt": [[3], [2**70]], "echo": True, "max_tokens": 1}, 400, "input_ids"),
]


@pytest.mark.parametrize("path,body,status,param", FOUND)
def test_what_fuzzing_found(server, path, body, status, param):
    r = httpx.post(server.url + path, json=body, timeout=60)
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param


def test_integral_numbers_are_integers(server):
    """JSON schema counts 2.0 as an integer, so the server does too (they were 400s)."""
    raw = (
        b'{"text": "a", "sampling_params": {"max_new_tokens": 2.0, "temperature": 0, "ignore_eos": true},'
        b' "top_logprobs_num": 1e0}'
    )
    r = httpx.post(
        server.url + "/generate", content=raw, headers={"Content-Type": "application/json"}, timeout=60
    )
    assert r.status_code == 200, r.text
    assert r.json()["meta_info"]["completion_tokens"] == 2
    fraction = httpx.post(
        server.url + "/generate", timeout=60, json={"text": "a", "sampling_params": {"max_new_tokens": 2.5}}
    )
    assert fraction.status_code == 400 and fraction.json()["error"]["param"] == "sampling_params"


def test_every_operation_against_its_document(server, api):
    ops = operations(api)
    doc = httpx.get(server.url + "/openapi.json", timeout=30).json()
    documented = {f"{method.upper()} {path}" for path, methods in doc["paths"].items() for method in methods}
    assert {op.label for op in ops} == documented - {"GET /openapi.json"}  # schemathesis skips its own
    failures: list[str] = []
    statuses: Counter = Counter()
    for op in ops:
        for mode in GenerationMode:  # NOTE: nothing negative exists for a body-less GET (Unsatisfiable)
            fuzz(op, mode, server.url, failures, statuses)
    assert not failures, "\n\n".join(failures)
    accepted = {label for label, mode, status in statuses if mode == "positive" and status == 200}
    assert {"POST /generate", "POST /v1/chat/completions", "POST /v1/completions"} <= accepted, statuses
    assert httpx.get(server.url + "/health", timeout=30).status_code == 200
    assert_server_kv_returned(server.url)


def test_the_document_is_behind_the_front_door(server):
    ok = httpx.get(server.url + "/openapi.json", timeout=30)
    assert ok.status_code == 200 and ok.json()["paths"]["/generate"]["post"]["requestBody"]
    rebound = httpx.get(server.url + "/openapi.json", headers={"Host": "attacker.example"}, timeout=30)
    assert rebound.status_code == 421
    foreign = httpx.get(
        server.url + "/openapi.json", headers={"Origin": "http://attacker.example"}, timeout=30
    )
    assert foreign.status_code == 403


# ---- issue 27: valid bodies carrying the hostile classes ------------------------------------------
HOSTILE_EXAMPLES = 8
_grammars = st.one_of(
    hs.deep_ebnf.map(lambda g: {"ebnf": g}),
    st.lists(hs.backtracking, min_size=1, max_size=40).map(lambda p: {"stop_regex": p}),
    hs.nested_repeats.map(lambda r: {"regex": r}),
    hs.repeat_schemas.map(lambda j: {"json_schema": j}),
)


def overlays(path: str) -> st.SearchStrategy:
    """``(fields for the sampling parameters, fields for the body)`` that reach a hostile class."""
    body_fields = [
        hs.oversize_ids.map(lambda rid: {"rid": rid}),
        hs.logprob_requests.map(lambda r: {k: v for k, v in r.items() if k != "sampling_params"}),
    ]
    if path == "/v1/chat/completions":
        body_fields.append(hs.tool_histories.map(lambda m: {"messages": m}))
    if path == "/v1/completions":
        body_fields[1] = hs.openai_logprobs
    return st.one_of(st.tuples(_grammars, st.just({})), st.tuples(st.just({}), st.one_of(*body_fields)))


def apply_overlay(case: Any, params: dict, fields: dict) -> None:
    body = case.body
    if not isinstance(body, dict):
        return
    if case.operation.path == "/generate":
        if "input_ids" in body or "input_segments" in body:  # the prompt stays the one the case drew
            fields = {k: v for k, v in fields.items() if k != "text"}
        sp = body.get("sampling_params")
        for p in sp if isinstance(sp, list) else [sp]:
            if isinstance(p, dict):
                p.update(params)
        if not isinstance(sp, (dict, list)):
            body["sampling_params"] = dict(params)
        body.update(fields)
        return
    body.update(params)
    if case.operation.path == "/v1/chat/completions":
        fields = {
            k: v for k, v in fields.items() if k not in ("text", "logprob_start_len", "top_logprobs_num")
        }
    body.update(fields)


def test_hostile_classes_through_the_document(server, api):
    failures: list[str] = []
    for op in operations(api):
        if op.path not in GENERATING or op.method.upper() != "POST":
            continue

        @settings(
            max_examples=HOSTILE_EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=op.as_strategy(generation_mode=GenerationMode.POSITIVE), overlay=overlays(op.path))
        def run(case: Any, overlay: tuple[dict, dict]) -> None:
            apply_overlay(case, *overlay)
            bound_body(case, GenerationMode.POSITIVE)
            response = case.call(base_url=server.url, timeout=120)
            assert response.status_code < 500, (response.status_code, response.text[:300])
            case.validate_response(response, checks=[status_code_conformance])
            assert httpx.get(server.url + "/health", timeout=30).status_code == 200, (
                "server down after the case"
            )

        try:
            run()
        except BaseException as e:  # noqa: BLE001 - every operation is tried; all failures reported
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            failures.append(f"{op.label}: {type(e).__name__}: {str(e)[:1500]}")
    assert not failures, "\n\n".join(failures)
    assert_server_kv_returned(server.url)


@pytest.fixture(scope="module")
def embedding_server(tmp_path_factory):
    from tests.helpers.embedding_models import save_st_decoder
    from tests.helpers.model_helpers import tiny_qwen3_config

    path = save_st_decoder(tiny_qwen3_config(), tmp_path_factory.mktemp("embedder"), "lasttoken", True)
    with launch_server(
        model=str(path), device="cpu", num_threads=1, kv_cache_gb=0.02, context_length=256, is_embedding=True
    ) as handle:
        yield handle


def test_embedding_operations_against_their_document(embedding_server):
    """An embedding server's own routes (``--is-embedding``) fuzzed the same way."""
    from radixlm.runtime.server.serving_mode import EMBEDDING_PATHS

    api = schemathesis.openapi.from_url(embedding_server.url + "/openapi.json")
    ops = [op for op in operations(api) if op.path in EMBEDDING_PATHS]
    assert {op.path for op in ops} == EMBEDDING_PATHS
    failures: list[str] = []
    statuses: Counter = Counter()
    for op in ops:
        for mode in GenerationMode:
            fuzz(op, mode, embedding_server.url, failures, statuses)
    assert not failures, "\n\n".join(failures)
    accepted = {label for label, mode, status in statuses if mode == "positive" and status == 200}
    assert {"POST /v1/embeddings", "POST /encode"} <= accepted, statuses
    assert_server_kv_returned(embedding_server.url)
