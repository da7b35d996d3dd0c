"""A GGUF file's experts are served from the file's blocks once: each expert's products read either
the file's own pages or a repacked copy of them, never a stacked copy kept beside the products, and
the logits are those of the same blocks dequantized."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.built_kernels import gguf_kernels, needs_cpu_kernels
from tests.helpers.model_conformance import tokens
from tests.helpers.model_helpers import save_tiny_gguf, save_tiny_model, tiny_kwargs

pytestmark = needs_cpu_kernels


@pytest.mark.parametrize("block_type", ["Q4_0", "Q8_0"])
def test_file_experts_hold_no_second_copy(block_type: str, tmp_path) -> None:
    from transformers import AutoModelForCausalLM, Qwen3MoeConfig

    from radixlm.runtime.layers.moe import GGUFExperts
    from tests.helpers.model_helpers import assert_logits_close, make_runner, prefill_then_decode_logits

    kwargs = tiny_kwargs(head_dim=32, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
    config = Qwen3MoeConfig(**kwargs, norm_topk_prob=True)
    hf_dir = save_tiny_model(config, tmp_path / "hf", seed=4, with_tokenizer=False)
    state = AutoModelForCausalLM.from_pretrained(str(hf_dir), dtype=torch.float32).state_dict()
    path = save_tiny_gguf(config, state, tmp_path / "moe.gguf", block_types={"proj": block_type})

    native = make_runner(path, quantization="auto")
    experts = [m for m in native.model.modules() if isinstance(m, GGUFExperts)]
    assert len(experts) == config.num_hidden_layers
    file_bytes = path.stat().st_size
    for layer in experts:
        for e in range(layer.num_experts):
            for product in layer.products(e):
                # the pieces are views of the file's mapping, not copies made while loading
                assert all(p.untyped_storage().nbytes() >= file_bytes // 2 for p in product.pieces)
            gate_up, down = layer.products(e)
            assert len(gate_up.pieces) == 2 and gate_up.bound_to_copy  # repacked, or joined once
            repacks = block_type == "Q4_0" and gguf_kernels.repack_by_default()
            assert down.bound_to_copy == repacks  # else the product reads the file's pages

    seq = tokens(12, 3)
    want = prefill_then_decode_logits(make_runner(path, quantization="none"), seq)
    got = prefill_then_decode_logits(native, seq)
    assert_logits_close(
        torch.cat([got[0], *(o[None] for o in got[1:])]),
        torch.cat([want[0], *(o[None] for o in want[1:])]),
        rtol=0.1,
    )
