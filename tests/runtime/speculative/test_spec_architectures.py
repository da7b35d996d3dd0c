"""Speculation on every architecture we serve: greedy output with n-gram drafts, and with the model
drafting for itself, is token for token the output without speculation. Native families (sliding
windows, soft-capping, MoE routing, rope variants, NoPE layers) and the transformers fallback; the
self-draft accepts every drafted token, so each verify row is compared with a plain decode step."""

from __future__ import annotations

import pytest

from tests.helpers.model_helpers import save_tiny_model
from tests.runtime.models import test_dense_families, test_gemma, test_moe, test_transformers_fallback
from tests.runtime.speculative.spec_helpers import repetitive_prompt, request, serve, standalone

CONFIGS = {
    **test_gemma.CONFIGS,
    **test_moe.CONFIGS,
    **test_dense_families.CONFIGS,
    **{f"fallback-{name}": make for name, make in test_transformers_fallback.CONFIGS.items()},
}


def _requests() -> list:
    # 40-46 token prompts: every sliding window (8) is passed before the drafts start
    return [
        request(f"r{i}", repetitive_prompt(40 + 3 * i, 3 + i), logprobs=i == 0, max_new_tokens=32)
        for i in range(3)
    ]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_greedy_is_unchanged_by_ngram_and_self_drafts(name: str, tmp_path) -> None:
    model = str(save_tiny_model(CONFIGS[name](), tmp_path))
    off, _ = serve(model, _requests(), False)
    ngram, _ = serve(model, _requests(), True, speculative_max_batch=64)
    drafted, draft_stats = serve(model, _requests(), False, **standalone(model))
    for rid in off:
        assert ngram[rid]["ids"] == off[rid]["ids"], (name, "ngram", rid)
        assert drafted[rid]["ids"] == off[rid]["ids"], (name, "self-draft", rid)
    assert draft_stats["spec_draft_tokens"] > 0
    assert draft_stats["spec_accepted_tokens"] == draft_stats["spec_draft_tokens"], draft_stats
