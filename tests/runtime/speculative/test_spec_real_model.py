"""The real SmolLM2-135M: greedy output with speculation on is token for token the output with it off.

Deterministic inference makes a row's bits independent of its batch, so the verify step (a decode
batch with one row per draft position) and plain decode steps agree exactly; without it the two
differ in the last bits like any two batch shapes do (``docs/architecture.md``, speculative decoding).
"""

from __future__ import annotations

import numpy as np

from tests.runtime.speculative.spec_helpers import request, serve, standalone

DOC = (
    "The harbor was rebuilt in 1871 after the flood. Its keeper kept a ledger of every visitor, "
    "every repair and every storm, and the council read the ledger aloud each spring. "
)


def _prompts(tokenizer) -> list[np.ndarray]:
    texts = [
        f"{DOC * 3}\nQuote the first sentence of the text above word for word.",
        "name: Alice Marchetti; email: alice@example.org; city: Florence.\n"
        "As JSON with keys name, email, city:",
    ]
    return [np.asarray(tokenizer.encode(t), dtype=np.int32) for t in texts]


def test_real_model_greedy_identical_batched_and_retracted(real_model_dir, smollm2_tokenizer):
    prompts = _prompts(smollm2_tokenizer)

    def make():
        return [request(f"q{i}", p, max_new_tokens=40) for i, p in enumerate(prompts)]

    common = {"enable_deterministic_inference": True, "max_total_tokens": 200}
    off, _ = serve(real_model_dir, make(), False, **common)
    on, stats = serve(real_model_dir, make(), True, speculative_max_batch=8, **common)
    for rid in off:
        assert on[rid]["ids"] == off[rid]["ids"], rid
    assert stats["spec_accepted_tokens"] > 0, stats
    assert stats["num_retractions"] > 0, stats


def test_real_model_drafting_for_itself_accepts_nearly_everything(real_model_dir, smollm2_tokenizer):
    prompts = _prompts(smollm2_tokenizer)

    def make():
        return [request(f"d{i}", p, max_new_tokens=32) for i, p in enumerate(prompts)]

    common = {"enable_deterministic_inference": True, "max_total_tokens": 200}
    off, _ = serve(real_model_dir, make(), False, **common)
    draft = standalone(real_model_dir, speculative_max_batch=8)
    on, stats = serve(real_model_dir, make(), False, **draft, **common)
    for rid in off:
        assert on[rid]["ids"] == off[rid]["ids"], rid
    assert stats["spec_accepted_tokens"] > 0.9 * stats["spec_draft_tokens"], stats
    assert stats["num_retractions"] > 0, stats
