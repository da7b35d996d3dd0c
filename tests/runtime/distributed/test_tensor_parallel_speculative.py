"""Speculation under tensor parallelism (tp_size=2 on CPU, gloo): the verify step is a decode batch
every rank runs, so greedy output with n-gram drafts, or with a draft model (which runs on the
scheduler's rank only), is what tp_size=2 gives without speculation, through retraction."""

from __future__ import annotations

import pytest

from tests.helpers.model_helpers import save_tiny_model, tiny_llama_config, tiny_qwen2_config
from tests.runtime.speculative.spec_helpers import repetitive_prompt, request, serve, standalone

TP = {"tp_size": 2, "max_total_tokens": 640}  # a small pool: six 180-token requests retract


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> tuple[str, str]:
    target = save_tiny_model(tiny_llama_config(num_key_value_heads=2), tmp_path_factory.mktemp("tp-target"))
    config = tiny_qwen2_config(num_hidden_layers=1, hidden_size=32, intermediate_size=64)
    draft = save_tiny_model(config, tmp_path_factory.mktemp("tp-draft"), seed=7)
    return str(target), str(draft)


def _requests() -> list:
    return [
        request(f"k{i}", repetitive_prompt(60, 3 + i, first=i), logprobs=i == 0, max_new_tokens=120)
        for i in range(6)
    ]


def _same(off: dict, on: dict) -> None:
    assert off.keys() == on.keys()
    for rid in off:
        assert on[rid]["ids"] == off[rid]["ids"], rid
        assert on[rid]["finish"] == off[rid]["finish"], rid
        assert [v for v, _ in on[rid]["logprobs"]] == pytest.approx(
            [v for v, _ in off[rid]["logprobs"]], abs=1e-4
        ), rid


def test_tp2_speculation_keeps_greedy_output(models: tuple[str, str]) -> None:
    target, draft = models
    off, _ = serve(target, _requests(), False, **TP)
    ngram, ngram_stats = serve(target, _requests(), True, speculative_max_batch=64, **TP)
    drafted, draft_stats = serve(target, _requests(), False, **standalone(draft), **TP)
    _same(off, ngram)
    _same(off, drafted)
    for stats in (ngram_stats, draft_stats):
        assert stats["spec_verify_steps"] > 0 and stats["num_retractions"] > 0, stats
    assert ngram_stats["spec_accepted_tokens"] > 0
