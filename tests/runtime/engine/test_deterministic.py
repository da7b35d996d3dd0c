"""--enable-deterministic-inference: a request's greedy and seeded outputs (texts and logprobs, to the
bit) do not depend on the rest of its batch, on cached prefixes, or on how its prompt was chunked."""

from __future__ import annotations

import pytest
import torch

from radixlm.runtime.executor.deterministic import (
    MIN_INVARIANT_ROWS,
    linear_is_row_invariant,
    padded_linear,
    tiled_linear,
)
from tests.helpers.engines import make_engine

PROMPTS = [f"Question {i}: tell me a short fact about the number {i * 7}." for i in range(32)]


def outputs(results: list[dict]) -> list[tuple[str, list[float]]]:
    return [(r["text"], [lp[0] for lp in r["meta_info"]["output_token_logprobs"]]) for r in results]


def test_padded_and_tiled_linear_compute_linear():
    w, x = torch.randn(40, 24), torch.randn(70, 24)
    for rows in (1, MIN_INVARIANT_ROWS - 1, 70):
        for fn in (padded_linear, tiled_linear):
            torch.testing.assert_close(fn(x[:rows], w), x[:rows] @ w.T)
    assert fn(x[:3].reshape(3, 1, 24), w).shape == (3, 1, 40)


def test_linear_is_row_invariant_on_this_blas():
    """The property padded_linear relies on (else the engine falls back to tiles)."""
    assert linear_is_row_invariant([torch.randn(1536, 576), torch.randn(576, 1536)])


@pytest.mark.real_model
@pytest.mark.parametrize(
    "params",
    [{"temperature": 0, "max_new_tokens": 16}, {"temperature": 0.8, "seed": 7, "max_new_tokens": 16}],
)
def test_batch_cache_and_chunking_invariant(real_model_dir, params):
    engine = make_engine(real_model_dir, enable_deterministic_inference=True)
    chunked = make_engine(
        real_model_dir, enable_deterministic_inference=True, disable_radix_cache=True, chunked_prefill_size=8
    )
    try:
        batch = outputs(engine.generate(PROMPTS, params, return_logprob=True))
        alone = [outputs([engine.generate(p, params, return_logprob=True)])[0] for p in PROMPTS]  # cached
        assert alone == batch
        in_chunks = [outputs([chunked.generate(p, params, return_logprob=True)])[0] for p in PROMPTS[:4]]
        assert in_chunks == batch[:4]
    finally:
        engine.shutdown()
        chunked.shutdown()
