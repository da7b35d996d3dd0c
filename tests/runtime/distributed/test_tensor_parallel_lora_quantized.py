"""LoRA on a quantized base under tensor parallelism (tp_size=2 on CPU, gloo): int8 rows and GGUF
blocks (q8_0, q4_0). The low-rank add joins the rank's quantized partial output (an
``Int8ColumnSlice`` or the rank's whole blocks of columns under o/down) before the all-reduce, so a
batch of an adapter and the base gives tp 1's logits on the same quantization (within the sum-order
drift that the int8 rounding can step, see test_tensor_parallel_quantized.py) and stays near PEFT's
adapter logits (q4_0's own rounding is larger, so PEFT is only compared on the finer ones)."""

from __future__ import annotations

import pytest

from radixlm.kernels.cpu.build import unavailable_reason
from radixlm.runtime.executor.forward_batch import ForwardMode
from tests.helpers.lora_helpers import PeftReference, save_peft_adapter
from tests.helpers.model_helpers import (
    TINY_SEQ,
    PagedSession,
    make_runner,
    save_tiny_model,
    tiny_llama_config,
)

LORA = dict(enable_lora=True, max_lora_rank=8)
BLOCKS_UNAVAILABLE = unavailable_reason()
QUANTIZATIONS = [
    "int8",
    pytest.param("q8_0", marks=pytest.mark.skipif(BLOCKS_UNAVAILABLE is not None, reason="no GGUF kernels")),
    pytest.param("q4_0", marks=pytest.mark.skipif(BLOCKS_UNAVAILABLE is not None, reason="no GGUF kernels")),
]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("tp_lora_quantized")
    base = save_tiny_model(tiny_llama_config(num_key_value_heads=2), root / "base")
    return {"base": base, "all8": save_peft_adapter(base, root / "all8", rank=8, alpha=16.0, seed=1)}


def _prefill(runner) -> list:
    s = PagedSession(runner)
    rows = [s.open(), s.open()]
    fb = s._build(ForwardMode.EXTEND, rows, [TINY_SEQ, TINY_SEQ[2:]], True)
    lora = runner.lora
    fb.lora_slots = lora.assign([lora.get("all8"), None])
    out = list(runner.forward(fb).split([len(TINY_SEQ), len(TINY_SEQ) - 2]))
    for row in rows:
        s.close(row)
    return out


@pytest.mark.parametrize("quantization", QUANTIZATIONS)
def test_quantized_base_with_an_adapter_under_tp2(files, quantization):
    paths = (f"all8={files['all8']}",)
    expected = _prefill(make_runner(files["base"], lora_paths=paths, quantization=quantization, **LORA))
    runner = make_runner(files["base"], tp_size=2, lora_paths=paths, quantization=quantization, **LORA)
    try:
        tuned, base = _prefill(runner)
    finally:
        runner.close()
    peft_tuned = PeftReference(files["base"], files["all8"]).logits(TINY_SEQ)
    peft_base = PeftReference(files["base"], None).logits(TINY_SEQ[2:])
    gap = (PeftReference(files["base"], None).logits(TINY_SEQ) - peft_tuned).abs().max()
    assert (tuned - expected[0]).abs().max() < 0.02 * gap
    assert (base - expected[1]).abs().max() < 0.02 * gap
    if quantization == "q4_0":
        return
    assert (tuned - peft_tuned).abs().max() < 0.1 * gap
    assert (base - peft_base).abs().max() < 0.1 * gap
