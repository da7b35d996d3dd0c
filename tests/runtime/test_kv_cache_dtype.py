"""``kv_cache_dtype``: a 16-bit KV cache under an fp32 model on the CPU (half the bytes a decode
step reads, twice the tokens held) stays close to the fp32 cache, and reports itself."""

from __future__ import annotations

import pytest
import torch

from radixlm.runtime.executor.model_runner import resolve_kv_dtype
from tests.helpers.engines import make_engine
from tests.helpers.kv_ownership import assert_engine_kv_returned
from tests.helpers.model_helpers import (
    TINY_SEQ,
    assert_logits_close,
    greedy_generate,
    make_runner,
    prefill_then_decode_logits,
    save_tiny_model,
    tiny_llama_config,
)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny_model(tiny_llama_config(), tmp_path_factory.mktemp("tiny"))


@pytest.mark.parametrize("kv_dtype,rtol", [("float16", 1e-3), ("bfloat16", 6e-3)])  # measured 3e-4, 2e-3
def test_a_16_bit_cache_stays_close_to_fp32(tiny_dir, kv_dtype: str, rtol: float) -> None:
    """Prefill and decode logits within the cache's rounding (fp16: 11 bits of mantissa, bf16: 8) of
    the fp32 cache's, and the same greedy text on a batch of prompts."""
    exact = make_runner(tiny_dir)
    half = make_runner(tiny_dir, kv_cache_dtype=kv_dtype)
    assert half.kv_pool.get_kv_buffer(0)[0].dtype == getattr(torch, kv_dtype)
    assert half.model_info()["kv_cache_dtype"] == kv_dtype
    assert exact.model_info()["kv_cache_dtype"] == "float32"
    for ours, ref in zip(
        prefill_then_decode_logits(half, TINY_SEQ), prefill_then_decode_logits(exact, TINY_SEQ)
    ):
        assert_logits_close(ours, ref, rtol=rtol)
    prompts = [[(7 * i + j) % 300 + 3 for j in range(5 + i % 4)] for i in range(8)]
    if kv_dtype == "float16":
        assert greedy_generate(half, prompts, 8) == greedy_generate(exact, prompts, 8)
    for runner in (half, exact):  # every request's slots went back to its pool
        assert runner.kv_pool.allocator.available_size() == runner.kv_pool.num_slots


def test_a_16_bit_cache_holds_twice_the_tokens(tiny_dir) -> None:
    """The same ``kv_cache_gb`` buys twice the slots at two bytes a value."""
    fp32 = make_runner(tiny_dir, max_total_tokens=None, kv_cache_gb=0.01)
    fp16 = make_runner(tiny_dir, max_total_tokens=None, kv_cache_gb=0.01, kv_cache_dtype="fp16")
    assert 2 * fp32.kv_pool.num_slots <= fp16.kv_pool.num_slots <= 2 * fp32.kv_pool.num_slots + 1  # floors


def test_engine_serves_and_reports_a_16_bit_cache(tiny_dir) -> None:
    engine = make_engine(str(tiny_dir), kv_cache_dtype="float16")
    try:
        out = engine.generate(
            input_ids=[[3, 4, 5, 6], [3, 4, 5, 7, 8]],
            sampling_params={"max_new_tokens": 6, "temperature": 0.0, "ignore_eos": True},
        )
        assert all(len(o["output_ids"]) == 6 for o in out)
        info = engine.get_server_info()
        assert info["kv_cache_dtype"] == "float16" and info["model_info"]["kv_cache_dtype"] == "float16"
        assert_engine_kv_returned(engine)
    finally:
        engine.shutdown()


def test_kv_cache_dtype_resolution() -> None:
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve_kv_dtype("auto", torch.float32, cpu) == torch.float32
    assert resolve_kv_dtype("bf16", torch.float32, cpu) == torch.bfloat16
    assert resolve_kv_dtype("auto", torch.bfloat16, cuda) == torch.bfloat16
    assert resolve_kv_dtype("bfloat16", torch.bfloat16, cuda) == torch.bfloat16
    with pytest.raises(ValueError, match="kv_cache_dtype 'float16' differs"):
        resolve_kv_dtype("float16", torch.bfloat16, cuda)
