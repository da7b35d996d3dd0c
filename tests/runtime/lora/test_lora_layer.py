"""``LoRALinear`` on every base linear path: the base product is untouched and each adapter's rows
get exactly ``x @ A^T @ B'^T`` on its targeted output slices, in each layout ``LoRABatch.plan`` picks
(padded groups, segments in place, gathered segments)."""

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
    x = torch.randn(10, IN, generator=gen)
    plain = base(x).clone()
    weights = {0: [(0, 64, a0q, b0q), (96, 128, a0v, b0v)], 1: [(64, 96, a1k, b1k)]}

    def check(slots: list[int], tokens: list[int], layout: str) -> torch.Tensor:
        batch.plan(slots, tokens)
        kind = "padded" if batch.padded is not None else "segments"
        gathered = layout in ("padded", "segments gathered")
        assert (kind, batch.rows is not None) == (layout.split()[0], gathered)
        row_slots = [s for s, n in zip(slots, tokens) for _ in range(n)]
        want = plain.clone()
        for slot, parts in weights.items():
            rows = [i for i, s in enumerate(row_slots) if s == slot]
            for lo, hi, a, b in parts:
                want[rows, lo:hi] += x[rows] @ a.T @ b.T
        y = layer(x)
        torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-4)
        base_rows = [i for i, s in enumerate(row_slots) if s < 0]
        assert torch.equal(y[base_rows], plain[base_rows])
        return y

    # decode-like: slot 0 rows 0-1, slot 1 rows 2 and 5 (apart), the rest the base: one padded grid
    check([0, 0, 1, -1, -1, 1, -1, -1, -1, -1], [1] * 10, "padded")
    check([0, 1, -1, 0], [2, 1, 6, 1], "padded")  # slot 0 has 3 rows, slot 1 one: a masked pad
    check([0, 1], [5, 5], "padded in place")  # every row under an adapter, in slot order
    check([0, 1, -1], [8, 1, 1], "segments")  # uneven and each slot contiguous: added in place
    check([1, 0, 1, -1], [1, 7, 1, 1], "segments gathered")  # slot 1's rows apart: gathered
    layer.set_slot(1, None)
    weights.pop(1)
    check([0, 0, 1, -1, -1, 1, -1, -1, -1, -1], [1] * 10, "padded")


def test_an_unwrapped_linear_is_the_plain_product() -> None:
    base = Linear(IN, 16)
    base.weight = torch.nn.Parameter(torch.randn(16, IN), requires_grad=False)
    layer = LoRALinear(base, [16], num_slots=1, batch=LoRABatch())
    x = torch.randn(3, IN)
    assert torch.equal(layer(x), base(x))
