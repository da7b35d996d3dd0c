"""Scheduling must never change what a request generates.

Greedy outputs of 16 prompts (some sharing prefixes, some longer than every chunk size) are served
one at a time by a default engine; then the same prompts go in one batch to engines that differ in
how they schedule: no radix cache, chunked prefill at several sizes, a KV pool small enough to force
retraction, the fcfs policy. Every variant must reproduce the reference tokens exactly. A seeded
sampled request must draw the same tokens alone, in a batch and after retraction.
"""

from __future__ import annotations

import pytest

from tests.helpers.engines import make_engine

GREEDY = {"temperature": 0, "max_new_tokens": 24}
SAMPLED = {"temperature": 0.8, "top_p": 0.9, "top_k": 50, "max_new_tokens": 24}
SHARED = "You are a careful assistant. Answer briefly and cite the rule you used. "  # 72 bytes = tokens


def _prompts() -> list[str]:
    """16 prompts of 10..~250 tokens (byte-level tokenizer); 8 share a 72-token prefix."""
    prompts = []
    for i in range(16):
        body = (
            f"question {i}: " + "why is the sky blue " * (i % 5) + " ".join(str(j * j) for j in range(2 * i))
        )
        prompts.append(SHARED + body if i % 2 == 0 else body)
    return prompts


PROMPTS = _prompts()

# NOTE: each variant gets its own engine; the pool of 320 slots holds 16 requests' prompts but not
# their growth, so decoding must retract (asserted below).
VARIANTS = {
    "no_radix_cache": {"disable_radix_cache": True},
    "chunk_8": {"chunked_prefill_size": 8},
    "chunk_32": {"chunked_prefill_size": 32},
    "chunk_100": {"chunked_prefill_size": 100},
    "no_chunking": {"chunked_prefill_size": 0},
    "fcfs": {"schedule_policy": "fcfs"},
    "lpm": {"schedule_policy": "lpm"},
    "small_kv_pool": {"max_total_tokens": 320},
    "mixed_chunk": {"enable_mixed_chunk": True, "mixed_chunk_size": 16},
    "mixed_chunk_small_pool": {"enable_mixed_chunk": True, "mixed_chunk_size": 40, "max_total_tokens": 320},
}


@pytest.fixture(scope="module")
def reference(tiny_llama_dir) -> list[list[int]]:
    """Greedy tokens of each prompt served alone (batch of 1) on a default, roomy engine."""
    engine = make_engine(tiny_llama_dir, kv_cache_gb=0.1)
    try:
        outs = []
        for p in PROMPTS:
            engine.flush_cache()
            outs.append(engine.generate(p, GREEDY)["output_ids"])
        engine.check_kv_integrity()
        return outs
    finally:
        engine.shutdown()


@pytest.fixture(scope="module", params=list(VARIANTS), ids=list(VARIANTS))
def variant_engine(request, tiny_llama_dir):
    engine = make_engine(tiny_llama_dir, **VARIANTS[request.param])
    engine.variant = request.param
    yield engine
    engine.shutdown()


def test_reference_is_not_degenerate(reference):
    """A model that repeats one token everywhere would make every comparison below vacuous."""
    assert len({tuple(r) for r in reference}) == len(PROMPTS)
    assert max(len(set(r)) for r in reference) >= 6


def test_greedy_batch_of_16_equals_batch_of_1(variant_engine, reference):
    outs = [o["output_ids"] for o in variant_engine.generate(PROMPTS, GREEDY)]
    mismatched = [i for i, (a, b) in enumerate(zip(outs, reference)) if a != b]
    assert not mismatched, f"{variant_engine.variant}: prompts {mismatched} generated different tokens"
    info = variant_engine.get_server_info()
    if variant_engine.variant in ("small_kv_pool", "mixed_chunk_small_pool"):
        assert info["num_retractions"] > 0, "the small pool did not force a retraction"
    if variant_engine.variant == "no_radix_cache":
        assert info["cache_hit_tokens"] == 0 and info["kv_cached"] == 0
    elif variant_engine.variant == "lpm":
        assert info["cache_hit_tokens"] >= 7 * len(SHARED) - 7  # the shared prefix computed once


def test_greedy_repeat_on_warm_cache_is_identical(variant_engine, reference):
    """A second pass serves the prompts from the cache (when enabled) and must not change tokens."""
    variant_engine.generate(PROMPTS, GREEDY)
    outs = variant_engine.generate(PROMPTS[::-1], GREEDY)
    assert [o["output_ids"] for o in outs] == reference[::-1]


def test_seeded_sample_is_the_same_alone_and_in_a_batch(tiny_engine):
    seeded = {**SAMPLED, "seed": 1234}
    alone = tiny_engine.generate(PROMPTS[4], seeded)["output_ids"]
    params = [{**SAMPLED, "seed": s} if s % 3 else GREEDY for s in range(len(PROMPTS))]
    params[4] = seeded
    tiny_engine.flush_cache()
    batch = tiny_engine.generate(PROMPTS, params)
    assert batch[4]["output_ids"] == alone
    small_batch = tiny_engine.generate([PROMPTS[0], PROMPTS[4], PROMPTS[9]], [SAMPLED, seeded, GREEDY])
    assert small_batch[1]["output_ids"] == alone


def test_seeded_sample_survives_retraction(tiny_llama_dir, tiny_engine):
    alone = [
        tiny_engine.generate(p, {**SAMPLED, "seed": 100 + i})["output_ids"] for i, p in enumerate(PROMPTS)
    ]
    small = make_engine(tiny_llama_dir, max_total_tokens=320)
    try:
        outs = small.generate(PROMPTS, [{**SAMPLED, "seed": 100 + i} for i in range(len(PROMPTS))])
        assert small.get_server_info()["num_retractions"] > 0
        assert [o["output_ids"] for o in outs] == alone
        small.check_kv_integrity()
    finally:
        small.shutdown()


def test_different_seeds_give_different_samples(tiny_engine):
    outs = {tuple(tiny_engine.generate(PROMPTS[3], {**SAMPLED, "seed": s})["output_ids"]) for s in range(6)}
    assert len(outs) >= 5
    unseeded = tiny_engine.generate([PROMPTS[3]] * 4, SAMPLED)
    assert len({tuple(o["output_ids"]) for o in unseeded}) >= 3, "unseeded requests must not share a seed"
