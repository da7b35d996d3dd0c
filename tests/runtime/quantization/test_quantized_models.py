"""Quantized serving on tiny random models: the layers swapped after load compute the same model as
its float weights replaced by the quantized values (the CUDA path), a GGUF file's own blocks are
served as stored (rope permutation undone), and ``auto``/fallbacks resolve as documented.

Logit tolerance: the kernels round activations to int8, in blocks of 32 for the GGUF kernel (steps
of 1/127 of the block's max) and per row in 7 bits for FBGEMM (reduce_range: steps of 2/127 of the
row's max, several times coarser). On these random 2-layer models that moves logits by up to ~1%
(blocks) and ~4% (int8) of their largest magnitude; 2% and 6% leave room for other seeds without
hiding a wrong block layout (a wrong row or nibble order moves them by tens of percent).
"""

from __future__ import annotations

import logging

import pytest
import torch

from radixlm.kernels.cpu import gguf_blocks
from radixlm.kernels.cpu.build import unavailable_reason
from radixlm.runtime.layers.quantized_linear import GGUFLinear, Int8Linear, QuantizedEmbedding
from radixlm.runtime.quantization import apply, methods
from tests.helpers.engines import make_engine
from tests.helpers.model_helpers import (
    TINY_SEQ,
    assert_logits_close,
    make_runner,
    prefill_then_decode_logits,
    save_tiny_gguf,
    save_tiny_model,
    tiny_llama_config,
)

pytestmark = pytest.mark.skipif(
    unavailable_reason() is not None, reason="GGUF CPU kernels cannot be built here"
)
SEQ = TINY_SEQ


def _logits(runner) -> list[torch.Tensor]:
    """Prefill logits of SEQ[:-3], then three decode steps."""
    return prefill_then_decode_logits(runner, SEQ)


def _assert_same_model(quantized, reference, rtol: float = 0.02) -> None:
    for ours, ref in zip(_logits(quantized), _logits(reference)):
        assert_logits_close(ours, ref, rtol=rtol)


@pytest.fixture(scope="module")
def tied_llama(tmp_path_factory):
    config = tiny_llama_config(tie_word_embeddings=True)
    return config, save_tiny_model(config, tmp_path_factory.mktemp("tied-llama"))


@pytest.mark.parametrize("method", ["int8", "q4_0", "q4_1", "q8_0"])
def test_quantized_layers_compute_the_roundtripped_float_model(tied_llama, method) -> None:
    _, path = tied_llama
    quantized = make_runner(path, quantization=method)
    assert quantized.quantization == method
    layer_type = Int8Linear if method == "int8" else GGUFLinear
    layers = [m for m in quantized.model.modules() if isinstance(m, layer_type)]
    assert len(layers) == 2 * 4 + 1  # qkv, o, gate_up, down per layer + the tied head
    assert isinstance(quantized.model.lm_head, QuantizedEmbedding)
    assert quantized.model.lm_head is quantized.model.model.embed_tokens
    reference = make_runner(path)
    apply._roundtrip_weights(reference.model, method)  # what CUDA serves for this method
    _assert_same_model(quantized, reference, rtol=0.06 if method == "int8" else 0.02)


def test_gguf_blocks_are_served_as_stored(tmp_path) -> None:
    """Q4_0 projections and a Q8_0 tied embedding: auto serves both formats from the file's bytes,
    and the same model as the file dequantized to fp32 (which the converter already proves equal to
    transformers reading the file)."""
    from transformers import LlamaForCausalLM

    config = tiny_llama_config(tie_word_embeddings=True)
    torch.manual_seed(0)
    hf = LlamaForCausalLM(config)
    path = save_tiny_gguf(
        config,
        hf.state_dict(),
        tmp_path / "tiny-q4_0.gguf",
        block_types={"proj": "Q4_0", "embed_tokens": "Q8_0"},
    )
    native = make_runner(path, quantization="auto")
    dequantized = make_runner(path)  # quantization none: the converted fp32 weights
    assert native.quantization == "q4_0"
    float_params = dict(dequantized.model.named_parameters())
    for name, module in native.model.named_modules():
        if isinstance(module, GGUFLinear) and not name.endswith(".head"):  # the tied head: below
            assert module.fmt == "q4_0"
            # the file's blocks, rows un-permuted: exactly the converter's fp32 weights
            assert torch.equal(gguf_blocks.dequantize(module.blocks, "q4_0"), float_params[f"{name}.weight"])
    head = native.model.lm_head
    assert isinstance(head, QuantizedEmbedding) and head.fmt == "q8_0"
    assert torch.equal(gguf_blocks.dequantize(head.rows, "q8_0"), float_params["model.embed_tokens.weight"])
    _assert_same_model(native, dequantized)


def test_an_explicit_other_format_requantizes_instead_of_serving_the_files_blocks(tmp_path) -> None:
    from transformers import LlamaForCausalLM

    config = tiny_llama_config()
    path = save_tiny_gguf(
        config, LlamaForCausalLM(config).state_dict(), tmp_path / "t.gguf", block_types={"proj": "Q4_0"}
    )
    runner = make_runner(path, quantization="q4_1")
    assert {m.fmt for m in runner.model.modules() if isinstance(m, GGUFLinear)} == {"q4_1"}


def test_auto_serves_float_checkpoints_unquantized(tied_llama) -> None:
    runner = make_runner(tied_llama[1], quantization="auto")
    assert runner.quantization == "none"
    assert not any(isinstance(m, (GGUFLinear, Int8Linear)) for m in runner.model.modules())


def test_resolve_method_rules_and_fallback(monkeypatch, caplog) -> None:
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert methods.resolve_method("auto", cpu, "q4_1") == "q4_1"
    assert methods.resolve_method("auto", cpu, None) == "none"
    assert methods.resolve_method("auto", cuda, "q4_1") == "none"  # dequantized to bf16 at load
    assert methods.resolve_method("q4_0", cuda, None) == "q4_0"  # values round-tripped on the GPU
    monkeypatch.setattr(methods, "unavailable_reason", lambda: "no compiler")
    with caplog.at_level(logging.WARNING):
        assert methods.resolve_method("q4_1", cpu, "q4_1") == "int8"
    assert "needs the GGUF CPU kernels" in caplog.text


def test_engine_reports_the_quantization_served(tied_llama) -> None:
    engine = make_engine(tied_llama[1], quantization="int8")
    try:
        info = engine.get_server_info()
        assert info["quantization"] == "int8" and info["model_info"]["quantization"] == "int8"
        out = engine.generate("hello", {"temperature": 0, "max_new_tokens": 4, "ignore_eos": True})
        assert len(out["output_ids"]) == 4
    finally:
        engine.shutdown()
    with pytest.raises(ValueError, match="quantization"):
        make_engine(tied_llama[1], quantization="q3_k")


def _resident_bytes_of(path) -> int:
    """Resident bytes of this process's mappings of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split()
            if fields and "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
                inside = len(fields) >= 6 and fields[5] == str(path)
            elif inside and fields[0] == "Rss:":
                total += int(fields[1]) * 1024
    return total


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/smaps"), reason="reads /proc/self/smaps")
@pytest.mark.parametrize("repack", ["1", "0"])
def test_repacked_q4_0_layers_leave_the_files_pages(tmp_path, monkeypatch, repack) -> None:
    """A Q4_0 layer the kernel repacks (groups of eight rows) reads only its copy, so the loader
    drops the file's pages from the process; served from the file (repack off), they stay resident.
    (The Q8_0 embedding's looked-up rows stay resident in both.)"""
    from transformers import LlamaForCausalLM

    monkeypatch.setenv("RADIXLM_GGUF_REPACK", repack)
    config = tiny_llama_config(
        hidden_size=512, intermediate_size=1536, num_attention_heads=8, num_key_value_heads=4
    )
    path = save_tiny_gguf(
        config,
        LlamaForCausalLM(config).state_dict(),
        tmp_path / "q4_0.gguf",
        block_types={"proj": "Q4_0", "lm_head": "Q4_0", "embed_tokens": "Q8_0"},
    )
    runner = make_runner(path, quantization="auto")
    _logits(runner)  # a forward reads every projection once
    layers = [m for m in runner.model.modules() if isinstance(m, GGUFLinear)]
    proj_bytes = sum(m.blocks.numel() for m in layers)
    resident = _resident_bytes_of(path)
    if repack == "1":
        assert all(m._product._kernel.repacked for m in layers)
        assert resident < 0.2 * proj_bytes, (resident, proj_bytes)
    else:
        assert resident > 0.8 * proj_bytes, (resident, proj_bytes)
