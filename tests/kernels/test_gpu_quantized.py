"""Quantized checkpoints on a GPU, where our C++ block kernels do not run.

A GGUF file is dequantized to the device's dtype at load (``auto`` serves ``none`` there), and an
explicit ``q4_0``/``q4_1``/``q8_0``/``int8`` serves the float weights replaced by the values that
format holds (``apply._roundtrip_weights``). So a CUDA runner must compute the same model as a CPU
runner given the same values: the CPU runner on the file dequantized to fp32 (which the converter
tests prove equal to transformers reading the file), or on the round-tripped float weights. Skipped
without CUDA; ``benchmarks/gpu/gpu_check.sh`` runs it.

Tolerances: in fp32 the two devices differ only in kernels and summation order (well under 1e-3 of
the logits' largest magnitude on these random 2-layer models, whose greedy tokens then agree, as in
``test_gpu_engine.py``); bf16 rounds weights and activations to 8 significant bits (~0.4% each),
which moves these logits by ~1%, so 4% there.
"""

from __future__ import annotations

import pytest
import torch

from radixlm.runtime.layers.quantized_linear import GGUFLinear, Int8Linear
from radixlm.runtime.quantization import apply
from tests.helpers.model_helpers import (
    TINY_SEQ,
    assert_logits_close,
    greedy_generate,
    make_runner,
    prefill_then_decode_logits,
    save_tiny_gguf,
    save_tiny_model,
    tiny_llama_config,
)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

PROMPTS = [TINY_SEQ[:5], TINY_SEQ[3:12], TINY_SEQ]


def _cuda_runner(path, **overrides):
    # no CUDA graphs: captured at every runner's start, they would add seconds a test to the GPU
    # check's budget, and test_gpu_engine.py covers them
    return make_runner(path, device="cuda", attention_backend="triton", disable_cuda_graph=True, **overrides)


def _assert_same_model(gpu, cpu, rtol: float, greedy: bool) -> None:
    for ours, ref in zip(
        prefill_then_decode_logits(gpu, TINY_SEQ), prefill_then_decode_logits(cpu, TINY_SEQ)
    ):
        assert_logits_close(ours.float().cpu(), ref, rtol=rtol)
    if greedy:
        assert greedy_generate(gpu, PROMPTS, 12) == greedy_generate(cpu, PROMPTS, 12)
    assert gpu.kv_pool.allocator.available_size() == gpu.kv_pool.num_slots  # every slot back


@pytest.mark.parametrize("dtype,rtol", [("float32", 1e-3), ("bfloat16", 0.04)])
def test_a_gguf_file_is_dequantized_on_the_gpu(tmp_path, dtype: str, rtol: float) -> None:
    from transformers import LlamaForCausalLM

    config = tiny_llama_config(tie_word_embeddings=True)
    torch.manual_seed(0)
    path = save_tiny_gguf(
        config,
        LlamaForCausalLM(config).state_dict(),
        tmp_path / "tiny.gguf",
        block_types={"proj": "Q4_0", "embed_tokens": "Q8_0"},
    )
    gpu = _cuda_runner(path, quantization="auto", dtype=dtype)
    assert gpu.quantization == "none"
    assert not any(isinstance(m, (GGUFLinear, Int8Linear)) for m in gpu.model.modules())
    assert gpu.model.lm_head.weight.dtype == getattr(torch, dtype)
    _assert_same_model(gpu, make_runner(path), rtol, greedy=dtype == "float32")


@pytest.mark.parametrize("method", ["q4_0", "q4_1", "q8_0", "int8"])
def test_an_explicit_format_on_the_gpu_serves_its_values(tmp_path, method: str) -> None:
    path = save_tiny_model(tiny_llama_config(tie_word_embeddings=True), tmp_path / "tiny")
    gpu = _cuda_runner(path, quantization=method, dtype="float32")
    assert gpu.quantization == method
    reference = make_runner(path)
    apply._roundtrip_weights(reference.model, method)
    _assert_same_model(gpu, reference, 1e-3, greedy=True)
