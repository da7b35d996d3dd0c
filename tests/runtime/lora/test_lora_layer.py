"""``LoRALinear`` on every base linear path: the base product is untouched and each adapter segment
gets exactly ``x @ A^T @ B'^T`` on its targeted output slices (contiguous and gathered segments)."""

from __future__ import annotations

import pytest
import torch

from radixlm.kernels.cpu import gguf_blocks
from radixlm.kernels.cpu.build import unavailable_reason
from radixlm.runtime.layers.linear import Linear, MergedLinear
from radixlm.runtime.layers.quantized_linear import GGUFLinear, Int8Linear
from radixlm.runtime.layers.stacked_linear import StackedLinear
from radixlm.runtime.lora.layer import LoRABatch, LoRALinear

SIZES = [64, 32, 32]  # a q/k/v-like fused output
IN = 256


def _float_merged(w: torch.Tensor) -> MergedLinear:
    layer = MergedLinear(IN, SIZES)
    layer.weight = torch.nn.Parameter(w.clone(), requires_grad=False)
    return layer


def _gguf_stacked(w: torch.Tensor) -> StackedLinear:
    parts = []
    for chunk, fmt in zip(w.split(SIZES), ["q8_0", "q4_k", "q6_k"]):
        parts.append(GGUFLinear(gguf_blocks.quantize(chunk, fmt), fmt, IN))
    return StackedLinear(parts)


BASES = {"float": _float_merged, "int8": lambda w: Int8Linear(w.clone()), "gguf": _gguf_stacked}


@pytest.mark.parametrize("kind", sorted(BASES))
def test_low_rank_add_on_each_linear_path(kind: str) -> None:
    if kind == "gguf" and unavailable_reason() is not None:
        pytest.skip("GGUF CPU kernels cannot be built here")
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(sum(SIZES), IN, generator=gen) * 0.1
    base = BASES[kind](w)
    batch = LoRABatch()
    layer = LoRALinear(base, SIZES, num_slots=2, batch=batch)
    # slot 0 targets q and v (slices 0 and 2) at rank 4; slot 1 targets k at rank 8
    a0q, b0q = torch.randn(4, IN, generator=gen), torch.randn(64, 4, generator=gen)
    a0v, b0v = torch.randn(4, IN, generator=gen), torch.randn(32, 4, generator=gen)
    a1k, b1k = torch.randn(8, IN, generator=gen), torch.randn(32, 8, generator=gen)
    layer.set_slot(0, {0: (a0q, b0q), 2: (a0v, b0v)})
    layer.set_slot(1, {1: (a1k, b1k)})
    x = torch.randn(7, IN, generator=gen)
    plain = base(x).clone()
    # rows 0-1 slot 0, rows 2 and 5 slot 1 (apart: gathered as [0, 1, 2, 5]), rows 3, 4, 6 the base
    batch.segments, batch.perm = [(0, slice(0, 2)), (1, slice(2, 4))], torch.tensor([0, 1, 2, 5])
    y = layer(x)
    want = plain.clone()
    want[0:2, 0:64] += x[0:2] @ a0q.T @ b0q.T
    want[0:2, 96:128] += x[0:2] @ a0v.T @ b0v.T
    want[[2, 5], 64:96] += x[[2, 5]] @ a1k.T @ b1k.T
    torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-4)
    assert torch.equal(y[[3, 4, 6]], plain[[3, 4, 6]])
    layer.set_slot(1, None)
    torch.testing.assert_close(layer(x)[[2, 5]], plain[[2, 5]])
    batch.segments, batch.perm = [(0, slice(0, 2))], None  # contiguous: added in place
    torch.testing.assert_close(layer(x)[0:2], want[0:2], rtol=1e-5, atol=1e-4)


def test_an_unwrapped_linear_is_the_plain_product() -> None:
    base = Linear(IN, 16)
    base.weight = torch.nn.Parameter(torch.randn(16, IN), requires_grad=False)
    layer = LoRALinear(base, [16], num_slots=1, batch=LoRABatch())
    x = torch.randn(3, IN)
    assert torch.equal(layer(x), base(x))
