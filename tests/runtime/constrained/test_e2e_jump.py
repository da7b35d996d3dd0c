"""Jump-forward on the tiny random model: same greedy text as without it, valid output, KV intact,
also under KV pressure (retraction) and with streaming."""

from __future__ import annotations

import json
import re

import pytest

from radixlm.runtime.constrained.backend import BACKENDS
from radixlm.runtime.constrained.outlines.grammar_regex import grammar_to_regex
from tests.helpers.engines import make_engine
from tests.runtime.constrained.cases import SCHEMA_CASES

ENGINE_ARGS = {"kv_cache_gb": 0.0002, "max_running_requests": 16, "debug_invariants": True}
NAMES = ("two_fields", "enum_field", "nested_object", "refs", "person", "tool_call", "array_of_objects")


def compact(schema: dict) -> str:
    return grammar_to_regex("json", json.dumps(schema), "")


REGEXES = [compact(s) for n, s in SCHEMA_CASES if n in NAMES] + [r"Answer: (yes|no)\. Reason: [a-z ]{1,12}\."]


@pytest.fixture(scope="module", params=BACKENDS)
def grammar_backend(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def plain_engine(tiny_llama_dir, grammar_backend):
    engine = make_engine(tiny_llama_dir, grammar_backend=grammar_backend, **ENGINE_ARGS)
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
def jump_engine(tiny_llama_dir, grammar_backend):
    engine = make_engine(
        tiny_llama_dir,
        enable_jump_forward=True,
        jump_forward_max_batch=1_000_000,
        grammar_backend=grammar_backend,
        **ENGINE_ARGS,
    )
    yield engine
    engine.shutdown()


def requests(temperature: float) -> tuple[list[str], list[dict]]:
    prompts = [f"prompt {i}: " + "x" * (5 * i) for i in range(2 * len(REGEXES))]
    params = [
        {"regex": rx, "temperature": temperature, "seed": i, "max_new_tokens": 120}
        for i, rx in enumerate(REGEXES + REGEXES)
    ]
    return prompts, params


def warm_grammars(engine) -> None:
    """Compile every grammar first, so all requests start together (compile times vary by backend and
    load, and staggered starts would relieve the KV pressure this test needs)."""
    engine.generate(["warm"] * len(REGEXES), [{"regex": rx, "max_new_tokens": 1} for rx in REGEXES])
    assert engine.flush_cache()


def test_greedy_text_unchanged_under_kv_pressure(plain_engine, jump_engine):
    prompts, params = requests(0)
    warm_grammars(plain_engine)
    warm_grammars(jump_engine)
    retractions = jump_engine.get_server_info()["num_retractions"]
    plain = plain_engine.generate(prompts, params)
    jumped = jump_engine.generate(prompts, params)
    assert [o["text"] for o in jumped] == [o["text"] for o in plain]
    stats = jump_engine.scheduler.jump_forward.stats
    assert stats["jumps"] > 0 and stats["draft_accepted"] > 0, stats
    assert jump_engine.get_server_info()["num_retractions"] > retractions, (
        "the pool was meant to force retractions"
    )


def test_sampled_outputs_match_and_stream(jump_engine):
    prompts, params = requests(1.0)
    for params_i, out in zip(params, jump_engine.generate(prompts, params)):
        if out["meta_info"]["finish_reason"]["type"] == "stop":
            assert re.fullmatch(params_i["regex"], out["text"]), out["text"]
    for p in (params[4], {**params[4], "temperature": 0}):
        chunks = list(jump_engine.generate(prompts[4], p, stream=True))
        assert len(chunks) > 1 and chunks[-1]["text"] == jump_engine.generate(prompts[4], p)["text"]
        assert all(b["text"].startswith(a["text"]) for a, b in zip(chunks, chunks[1:]))
