"""Speculation on or off, the same tokens: greedy and seeded sampling, every sampling option, logprobs,
stops, grammars, batching, retraction, chunked prefill beside verify steps and mixed chunks; and the
per-request off switch."""

from __future__ import annotations

import re

import pytest

from radixlm.runtime.scheduler.scheduled_batch import BatchKind
from tests.helpers.engines import tiny_scheduler
from tests.helpers.logit_processors import BanToken
from tests.runtime.speculative.spec_helpers import PLAIN, SPEC, repetitive_prompt, request, serve

MANY = {"speculative_max_batch": 64}  # speculate at every batch size these tests run


def _both(model_dir: str, make, **overrides):
    off, _ = serve(model_dir, make(), False, **overrides)
    on, stats = serve(model_dir, make(), True, **MANY, **overrides)
    return off, on, stats


def _assert_same(off: dict, on: dict) -> None:
    assert off.keys() == on.keys()
    for rid in off:
        assert on[rid]["ids"] == off[rid]["ids"], rid
        assert on[rid]["finish"] == off[rid]["finish"], rid
        lp_off, lp_on = off[rid]["logprobs"], on[rid]["logprobs"]
        assert [t for _, t in lp_on] == [t for _, t in lp_off], rid
        # the verify extend and the decode step round differently in the last bits
        assert [v for v, _ in lp_on] == pytest.approx([v for v, _ in lp_off], abs=1e-4), rid


def test_greedy_batch_with_logprobs_is_identical_and_accepts_drafts(tiny_llama_dir):
    def make():
        return [
            request(f"r{i}", repetitive_prompt(50 + 3 * i, 4 + i), logprobs=i % 2 == 0, max_new_tokens=48)
            for i in range(4)
        ]

    off, on, stats = _both(tiny_llama_dir, make)
    _assert_same(off, on)
    assert stats["spec_accepted_tokens"] > 0 and stats["spec_verify_steps"] > 0


def test_seeded_sampling_is_identical(tiny_llama_dir):
    def make():
        return [
            request(f"s{i}", repetitive_prompt(40, 5), temperature=0.5, top_k=3, seed=11 + i)
            for i in range(3)
        ]

    off, on, stats = _both(tiny_llama_dir, make)
    _assert_same(off, on)
    assert stats["spec_verify_steps"] > 0


def test_every_sampling_option_keeps_its_output(tiny_llama_dir):
    """Options that make a verify row depend on the tokens accepted before it in the same step
    (penalties, bias, a minimum length, a custom processor, seeded top-p / min-p draws): each row
    is sampled as the plain step at its position would."""
    prompt = repetitive_prompt(48, 4)
    options = [
        {"logit_bias": {"7": 2.5, "11": -4.0}},
        {"presence_penalty": 0.6, "frequency_penalty": 0.2},
        {"repetition_penalty": 1.3},
        {"min_new_tokens": 30, "ignore_eos": False},
        {"custom_logit_processor": BanToken.to_str(), "custom_params": {"token_id": int(prompt[-1])}},
        {"temperature": 0.7, "top_p": 0.9, "seed": 5},
        {"temperature": 0.9, "min_p": 0.2, "seed": 6},
    ]

    def make():
        # greedy ones without logprobs: those could take the one-argmax path (spec_greedy.py)
        return [request(f"o{i}", prompt, logprobs="seed" in o, **o) for i, o in enumerate(options)]

    off, on, stats = _both(tiny_llama_dir, make, enable_custom_logit_processor=True)
    _assert_same(off, on)
    assert stats["spec_verify_steps"] > 0 and stats["spec_accepted_tokens"] > 0, stats


def test_retraction_under_kv_pressure_keeps_tokens(tiny_llama_dir):
    def make():
        return [request(f"k{i}", repetitive_prompt(60, 3 + i, first=i), max_new_tokens=120) for i in range(6)]

    off, on, stats = _both(tiny_llama_dir, make, max_total_tokens=640)
    _assert_same(off, on)
    assert stats["num_retractions"] > 0 and stats["spec_accepted_tokens"] > 0


def _late_text(tokenizer, ids: list[int], start: int) -> str:
    """Text of a token at or after ``start`` whose first appearance in the decoded output is there."""
    text = tokenizer.decode(ids)
    for i in range(start, len(ids)):
        piece = tokenizer.decode(ids[i : i + 1])
        if piece.strip() and "\ufffd" not in piece and text.find(piece) >= len(tokenizer.decode(ids[:i])):
            return piece
    raise AssertionError("no text first appears late in the output")


def test_stops_inside_an_accepted_run_cut_it(tiny_llama_dir):
    from transformers import AutoTokenizer

    plain, _ = serve(tiny_llama_dir, [request("p", repetitive_prompt(50, 4), max_new_tokens=60)], False)
    ids = plain["p"]["ids"]
    stop_id = ids[12]  # a token that comes back inside the copied run
    late = re.escape(_late_text(AutoTokenizer.from_pretrained(tiny_llama_dir), ids, 20))

    def make():
        return [
            request("id", repetitive_prompt(50, 4), max_new_tokens=60, stop_token_ids=[stop_id]),
            request("len", repetitive_prompt(50, 4), max_new_tokens=17),
            request("str", repetitive_prompt(50, 4), max_new_tokens=60, stop=["\x1f"]),
            request("regex", repetitive_prompt(50, 4), max_new_tokens=60, stop_regex=[late]),
        ]

    off, on, stats = _both(tiny_llama_dir, make)
    _assert_same(off, on)
    assert len(on["len"]["ids"]) == 17
    assert on["id"]["ids"][-1] == stop_id
    assert on["regex"]["finish"]["type"] == "stop" and 20 < len(on["regex"]["ids"]) < 60
    assert stats["spec_accepted_tokens"] > 0


@pytest.mark.parametrize("jump_forward", [False, True])
def test_grammar_constrained_drafts(tiny_llama_dir, jump_forward):
    def make():
        return [
            request("re", repetitive_prompt(40, 4), max_new_tokens=30, regex="(ab|cd|[0-9])+"),
            request("free", repetitive_prompt(40, 4), max_new_tokens=30),
        ]

    off, on, stats = _both(tiny_llama_dir, make, enable_jump_forward=jump_forward)
    _assert_same(off, on)
    assert stats["spec_verify_steps"] > 0


def test_per_request_off_switch(tiny_llama_dir):
    reqs = [request("no", repetitive_prompt(50, 4), max_new_tokens=30, speculative=False)]
    on, stats = serve(tiny_llama_dir, reqs, True, **MANY)
    assert stats["spec_verify_steps"] == 0 and len(on["no"]["ids"]) == 30


def test_streaming_sends_an_accepted_run_in_one_output(tiny_llama_dir):
    def make():
        r = request("st", repetitive_prompt(50, 4), max_new_tokens=48)
        r.stream = True
        return [r]

    off, on, stats = _both(tiny_llama_dir, make)
    _assert_same(off, on)
    assert stats["spec_accepted_tokens"] > 0
    assert on["st"]["outs"] < off["st"]["outs"]


def _short_streams_then_long_prompts(model_dir: str, speculate: bool, **chunking) -> tuple[dict, list, list]:
    """Two short requests decode (verifying drafts when ``speculate``), then two long prompts
        arrive and are prefilled in chunks. Every request's tokens, and the kinds of the steps run before
    and after they arrived."""
    args = {**(SPEC if speculate else PLAIN), **MANY, **chunking}
    kinds: list[BatchKind] = []
    got: dict[str, list[int]] = {}
    with tiny_scheduler(model_dir, **args) as sched:
        schedule = sched._schedule

        def recording():
            batch = schedule()
            if batch is not None:
                kinds.append(batch.kind)
            return batch

        def step() -> None:
            for out in sched.step():
                got.setdefault(out.rid, []).extend(out.new_token_ids.tolist())

        sched._schedule = recording
        for i in range(2):
            sched.handle(request(f"short{i}", repetitive_prompt(30 + 5 * i, 3 + i), max_new_tokens=60))
        while len(got.get("short0", [])) < 12:
            step()
        arrival = len(kinds)
        for i in range(2):
            sched.handle(request(f"long{i}", repetitive_prompt(150 + 30 * i, 5 + i), max_new_tokens=30))
        while sched.has_work():
            step()
        sched.check_kv_integrity()
    return got, kinds[:arrival], kinds[arrival:]


@pytest.mark.parametrize("mixed", [False, True])
def test_prompts_chunked_between_verify_steps(tiny_llama_dir, mixed):
    """Long prompts in 16-token chunks arrive while short requests verify drafts: each step is a
    chunk (with ``enable_mixed_chunk``, with a decode token of each running request) or a verify
    step, and every request gets the tokens it gets without speculation."""
    chunking = {"chunked_prefill_size": 16, "enable_mixed_chunk": mixed, "mixed_chunk_size": 16}
    off, _, _ = _short_streams_then_long_prompts(tiny_llama_dir, False, **chunking)
    on, before, after = _short_streams_then_long_prompts(tiny_llama_dir, True, **chunking)
    assert on == off
    assert BatchKind.VERIFY in before, before
    chunk = BatchKind.MIXED_CHUNK if mixed else BatchKind.EXTEND
    assert after[0] is chunk and after.count(chunk) >= 2, after  # 150+ tokens in 16-token chunks
    assert BatchKind.VERIFY in after[after.index(chunk) :], after
