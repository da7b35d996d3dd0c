"""Greedy verify rows decided by one argmax (``spec_greedy.py``): which requests qualify, and that
their tokens are plain decoding's, alone or batched with requests that still sample round by round."""

from __future__ import annotations

import pytest
import torch

from radixlm.runtime.sampling.sampling_params import SamplingParams
from radixlm.runtime.scheduler import token_processor
from radixlm.runtime.scheduler.spec_greedy import greedy_rows, history_free
from tests.runtime.speculative.spec_helpers import repetitive_prompt, request, serve

MANY = {"speculative_max_batch": 64}


class _Req:
    def __init__(self, output_ids: list[int], grammar: object = None, return_logprob: bool = False, **params):
        self.sampling_params = SamplingParams(**params)
        self.output_ids = output_ids
        self.grammar = grammar
        self.return_logprob = return_logprob


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"temperature": 0}, True),
        ({"temperature": 0.7, "top_k": 1}, True),
        ({"temperature": 0.7}, False),
        ({"temperature": 0, "frequency_penalty": 0.5}, False),
        ({"temperature": 0, "presence_penalty": 0.5}, False),
        ({"temperature": 0, "repetition_penalty": 1.2}, False),
        ({"temperature": 0, "logit_bias": {"5": 3.0}}, False),
        ({"temperature": 0, "min_new_tokens": 3}, False),  # two tokens so far: EOS still banned
        ({"temperature": 0, "min_new_tokens": 2}, True),
        ({"temperature": 0, "return_logprob": True}, False),
        ({"temperature": 0, "grammar": object()}, False),
    ],
)
def test_history_free(kwargs, expected):
    assert history_free(_Req([7, 8], **kwargs)) is expected  # type: ignore[arg-type]


def test_greedy_rows_takes_each_rows_argmax_and_skips_non_finite():
    class _Batch:
        reqs = [
            _Req([1], temperature=0),
            _Req([1], temperature=0.7),
            _Req([1], temperature=0),
            _Req([1], temperature=0),
        ]
        spec_drafts = [[4, 5], [4], [], [9]]
        draft_rows = [(0, 3), (3, 2), (5, 1), (6, 2)]

    logits = torch.zeros(8, 10)
    for row, token in enumerate([4, 5, 6, 1, 2, 3, 9, 9]):
        logits[row, token] = 1.0
    logits[7, 9] = float("nan")  # request 3's second row: the sampler must report it
    assert greedy_rows(_Batch(), logits) == {0: [4, 5, 6]}  # type: ignore[arg-type]


def test_decided_and_sampled_requests_together_match_plain_decoding(tiny_llama_dir, monkeypatch):
    decided: list[int] = []
    real = token_processor.greedy_rows

    def counting(batch, logits):
        out = real(batch, logits)
        decided.append(len(out))
        return out

    monkeypatch.setattr(token_processor, "greedy_rows", counting)

    def make():
        return [
            request("fast", repetitive_prompt(50, 4), max_new_tokens=40),
            request("min", repetitive_prompt(50, 5), max_new_tokens=40, min_new_tokens=20, ignore_eos=False),
            request("pen", repetitive_prompt(50, 3), max_new_tokens=40, frequency_penalty=0.3),
            request("sam", repetitive_prompt(50, 4), max_new_tokens=40, temperature=0.6, seed=5),
            request("lp", repetitive_prompt(50, 4), logprobs=True, max_new_tokens=40),
        ]

    off, _ = serve(tiny_llama_dir, make(), False)
    on, stats = serve(tiny_llama_dir, make(), True, **MANY)
    for rid in off:
        assert on[rid]["ids"] == off[rid]["ids"], rid
        assert on[rid]["finish"] == off[rid]["finish"], rid
    assert stats["spec_accepted_tokens"] > 0
    assert any(decided), "the one-argmax path never ran"
