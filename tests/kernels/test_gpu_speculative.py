"""Speculative decoding on CUDA: the verify step (a decode batch with one row per draft position,
replayed through the CUDA graphs when they are on) gives the greedy tokens of plain decoding, with
n-gram drafts and with the model drafting for itself (whose drafts must then all be accepted), and
every KV slot returns to the pool. Skipped without CUDA; ``benchmarks/gpu_check.sh`` runs it."""

from __future__ import annotations

import pytest
import torch

from tests.runtime.speculative.spec_helpers import repetitive_prompt, request, serve, standalone

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _requests() -> list:
    return [
        request(f"g{i}", repetitive_prompt(50 + 3 * i, 4 + i), logprobs=i == 0, max_new_tokens=40)
        for i in range(4)
    ]


@pytest.mark.parametrize("cuda_graph", [False, True])
def test_verify_steps_on_cuda_keep_greedy_output(tiny_llama_dir, cuda_graph):
    gpu = {"device": "cuda", "attention_backend": "triton", "disable_cuda_graph": not cuda_graph}
    off, _ = serve(tiny_llama_dir, _requests(), False, **gpu)
    ngram, ngram_stats = serve(tiny_llama_dir, _requests(), True, speculative_max_batch=64, **gpu)
    drafted, draft_stats = serve(tiny_llama_dir, _requests(), False, **standalone(tiny_llama_dir), **gpu)
    for rid in off:
        assert ngram[rid]["ids"] == off[rid]["ids"], rid
        assert drafted[rid]["ids"] == off[rid]["ids"], rid
    assert ngram_stats["spec_verify_steps"] > 0 and ngram_stats["spec_accepted_tokens"] > 0
    assert draft_stats["spec_accepted_tokens"] == draft_stats["spec_draft_tokens"] > 0, draft_stats
