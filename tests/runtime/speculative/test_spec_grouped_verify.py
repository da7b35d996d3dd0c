"""A verify step's rows of one request take the grouped in-place decode attention (each request's
keys read once for all of its draft positions) and the tokens stay those of plain greedy decoding."""

from __future__ import annotations

from radixlm.kernels.cpu.build import decode_kernels_if_ready
from tests.helpers.built_kernels import needs_cpu_kernels
from tests.helpers.engines import tiny_scheduler
from tests.runtime.speculative.spec_helpers import PLAIN, SPEC, repetitive_prompt, request, run_all

pytestmark = needs_cpu_kernels


def _make():
    # prompts past one 128-key chunk, so groups span several chunks and rows end mid-chunk
    return [request(f"g{i}", repetitive_prompt(300 + 41 * i, 5 + i), max_new_tokens=40) for i in range(3)]


def test_verify_rows_take_the_grouped_kernel_and_match_plain_greedy(tiny_llama_dir):
    assert decode_kernels_if_ready() is not None
    with tiny_scheduler(tiny_llama_dir, **PLAIN) as sched:
        off = run_all(sched, _make())
        assert sched.runner.attn_backend.grouped_decode_steps == 0
    with tiny_scheduler(tiny_llama_dir, **SPEC, speculative_max_batch=64) as sched:
        on = run_all(sched, _make())
        stats = sched.stats()
        grouped = sched.runner.attn_backend.grouped_decode_steps
    assert stats["spec_verify_steps"] > 0 and stats["spec_accepted_tokens"] > 0
    assert grouped > 0
    assert {rid: r["ids"] for rid, r in on.items()} == {rid: r["ids"] for rid, r in off.items()}
