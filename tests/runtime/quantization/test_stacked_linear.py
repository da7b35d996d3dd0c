"""``StackedLinear``: a fused projection whose parts keep different formats, and its tensor-parallel
row cut (a rank's rows may span two parts)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from radixlm.kernels.cpu import gguf_blocks
from radixlm.kernels.cpu.build import unavailable_reason
from radixlm.runtime.layers.linear import Linear
from radixlm.runtime.layers.quantized_linear import GGUFLinear
from radixlm.runtime.layers.quantized_shards import quantized_rows
from radixlm.runtime.layers.stacked_linear import StackedLinear

pytestmark = pytest.mark.skipif(
    unavailable_reason() is not None, reason="GGUF CPU kernels cannot be built here"
)


def _layer() -> tuple[StackedLinear, list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    w = [torch.randn(rows, 256, generator=gen) * 0.1 for rows in (40, 24, 16)]
    float_part = Linear(256, 24)
    float_part.weight = torch.nn.Parameter(w[1], requires_grad=False)
    parts = [
        GGUFLinear(gguf_blocks.quantize(w[0], "q4_k"), "q4_k", 256),
        float_part,
        GGUFLinear(gguf_blocks.quantize(w[2], "q6_k"), "q6_k", 256),
    ]
    return StackedLinear(parts, torch.randn(80, generator=gen)), w


def test_parts_are_concatenated_with_the_bias_added_once() -> None:
    layer, w = _layer()
    x = torch.randn(2, 3, 256)
    y = layer(x)
    assert y.shape == (2, 3, 80) and layer.out_sizes == [40, 24, 16]
    q4 = gguf_blocks.dequantize(layer.parts[0].blocks, "q4_k")
    q6 = gguf_blocks.dequantize(layer.parts[2].blocks, "q6_k")
    ref = F.linear(x, torch.cat([q4, w[1], q6]), layer.bias)
    torch.testing.assert_close(y, ref, atol=0.02 * ref.abs().max().item(), rtol=0)  # int8 activations
    torch.testing.assert_close(y[..., 40:64], ref[..., 40:64])  # the float part is exact


def test_rows_cut_across_parts_compute_those_rows() -> None:
    layer, _ = _layer()
    x = torch.randn(5, 256)
    full = layer(x)
    cut = quantized_rows(layer, [(10, 40), (70, 10)])  # rows 10..49 span parts 0 and 1
    assert isinstance(cut, StackedLinear) and cut.out_sizes == [30, 10, 10]
    torch.testing.assert_close(cut(x), torch.cat([full[:, 10:50], full[:, 70:80]], dim=1))
