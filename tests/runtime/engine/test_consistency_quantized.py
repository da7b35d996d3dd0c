"""The output-identity checks of ``test_consistency`` on the quantized paths (GGUF Q4_0 blocks and
FBGEMM int8): scheduling (radix cache off, chunk sizes, retraction, mixed prefill+decode chunks)
and batch shape (1 vs 16) must not change a greedy token. Both kernels are batch-invariant by
construction: activations are quantized per row (per row block for Q4_0), and each output's sum
runs in the same order whatever the batch (int32 accumulation is exact in FBGEMM).

The engines run with ``enable_deterministic_inference``: without it the attention of a prompt
prefilled in chunks differs from the whole prompt's in the last bits (~1e-6 in logprobs, fp32 too),
and rounding activations to int8 can turn such a difference into another greedy token where two are
close (Q4_0 repacked in groups of eight rows flipped one prompt under chunk_8 and small_kv_pool).
What this file checks is that the quantized products add no variance of their own."""

from __future__ import annotations

import pytest

from radixlm.kernels.cpu.build import unavailable_reason
from tests.helpers.engines import make_engine
from tests.runtime.engine.test_consistency import GREEDY, PROMPTS, VARIANTS

METHODS = ["q4_0", "int8"]
CHECKED = ["no_radix_cache", "chunk_8", "chunk_100", "small_kv_pool", "mixed_chunk"]
pytestmark = pytest.mark.skipif(
    unavailable_reason() is not None, reason="GGUF CPU kernels cannot be built here"
)


@pytest.fixture(scope="module", params=METHODS)
def quantized_reference(request, tiny_llama_dir) -> tuple[str, list[list[int]]]:
    """Greedy tokens of each prompt served alone on a roomy engine with this quantization."""
    engine = make_engine(
        tiny_llama_dir, kv_cache_gb=0.1, quantization=request.param, enable_deterministic_inference=True
    )
    try:
        outs = []
        for p in PROMPTS:
            engine.flush_cache()
            outs.append(engine.generate(p, GREEDY)["output_ids"])
        engine.check_kv_integrity()
        return request.param, outs
    finally:
        engine.shutdown()


@pytest.mark.parametrize("variant", CHECKED)
def test_quantized_greedy_batch_of_16_equals_batch_of_1(quantized_reference, tiny_llama_dir, variant):
    method, reference = quantized_reference
    assert len({tuple(r) for r in reference}) == len(PROMPTS)  # not degenerate
    engine = make_engine(
        tiny_llama_dir, quantization=method, enable_deterministic_inference=True, **VARIANTS[variant]
    )
    try:
        assert engine.get_server_info()["quantization"] == method
        outs = [o["output_ids"] for o in engine.generate(PROMPTS, GREEDY)]
        mismatched = [i for i, (a, b) in enumerate(zip(outs, reference)) if a != b]
        assert not mismatched, f"{method}/{variant}: prompts {mismatched} generated different tokens"
        if variant == "small_kv_pool":
            assert engine.get_server_info()["num_retractions"] > 0
        warm = engine.generate(PROMPTS[::-1], GREEDY)  # served from the cache where enabled
        assert [o["output_ids"] for o in warm] == reference[::-1]
        engine.check_kv_integrity()
    finally:
        engine.shutdown()
