"""One tensor-parallel rank's part of a quantized layer, cut from the whole layer's quantized values,
so every rank multiplies with exactly the numbers a single process would.

- Output rows (column-parallel q/k/v and gate/up, the vocabulary rows of an embedding or LM head):
  GGUF rows are whole runs of blocks, int8 rows keep their own scale; both are plain row slices.
- Input columns (row-parallel o and down): GGUF blocks run along the input dimension, so a rank
  takes whole blocks (its share must start and end on a multiple of the block size, 32 or 256 for the
  K-quants, else the layer is refused by name); int8 columns keep the full row's scale, and
  ``Int8ColumnSlice`` quantizes its activations against the whole input row's max (an all-reduce of
  one float per token), as one process would.
- A ``StackedLinear`` (a fused projection whose parts differ in format) splits by output rows only:
  each rank takes each part's share of its rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from radixlm.kernels.cpu import gguf_blocks
from radixlm.runtime.distributed import comm
from radixlm.runtime.distributed.partition import padded_rows, take_rows
from radixlm.runtime.layers.linear import Linear
from radixlm.runtime.layers.quantized_linear import GGUFLinear, Int8Linear, QuantizedEmbedding
from radixlm.runtime.layers.stacked_linear import StackedLinear

QUANTIZED_LINEAR = (GGUFLinear, Int8Linear, StackedLinear)


class Int8ColumnSlice(Int8Linear):
    """Some input columns of an ``Int8Linear`` (no bias): its activations are scaled by the max of
    the whole input row across ranks, so the int8 values match the unsplit layer's."""

    def row_max(self, flat: torch.Tensor) -> torch.Tensor:
        return comm.all_reduce_max(flat.abs().amax(dim=1, keepdim=True)).clamp_min(1e-12)


def quantized_rows(layer: nn.Module, blocks: Sequence[tuple[int, int]]) -> nn.Module:
    """The output rows in ``blocks`` of a ``GGUFLinear``/``Int8Linear``/``StackedLinear`` (and their bias)."""
    bias = None if layer.bias is None else take_rows(layer.bias, blocks)
    if isinstance(layer, StackedLinear):
        return StackedLinear(_stacked_pieces(layer, blocks), bias)
    if isinstance(layer, Linear):
        return Linear.from_weight(take_rows(layer.weight.data, blocks))  # a stacked part
    if isinstance(layer, GGUFLinear):
        return GGUFLinear(take_rows(layer.blocks, blocks), layer.fmt, layer.in_features, bias)
    q, scales = layer.int8_weight()
    return Int8Linear.from_int8(take_rows(q, blocks), take_rows(scales, blocks), bias, layer.reduce_range)


def _stacked_pieces(layer: StackedLinear, blocks: Sequence[tuple[int, int]]) -> list[nn.Module]:
    """Each part's share of the rows in ``blocks``, in order (a block may span parts)."""
    pieces = []
    for start, count in blocks:
        offset = 0
        for part, size in zip(layer.parts, layer.out_sizes):
            lo, hi = max(start, offset), min(start + count, offset + size)
            if lo < hi:
                pieces.append(quantized_rows(part, [(lo - offset, hi - lo)]))
            offset += size
    return pieces


def quantized_columns(layer: nn.Module, start: int, count: int, name: str, tp_size: int) -> nn.Module:
    """Input columns ``[start, start + count)`` of a ``GGUFLinear``/``Int8Linear``, without its bias
    (a row-parallel layer adds it once, after the sum)."""
    if isinstance(layer, StackedLinear):
        raise ValueError(f"{name}: a row-parallel layer stacked from several formats cannot be split")
    if isinstance(layer, GGUFLinear):
        block = gguf_blocks.BLOCK_ELEMENTS[layer.fmt]
        if start % block or count % block:
            raise ValueError(
                f"{name}: under tp_size {tp_size} each rank holds {count} of its "
                f"{layer.in_features} input features, not a multiple of the {layer.fmt} "
                f"block size {block}; serve it with --quantization int8 or none"
            )
        per_block = gguf_blocks.BLOCK_BYTES[layer.fmt]
        cols = layer.blocks.narrow(1, start // block * per_block, count // block * per_block)
        return GGUFLinear(cols.contiguous(), layer.fmt, count)
    q, scales = layer.int8_weight()
    return Int8ColumnSlice.from_int8(q[:, start : start + count], scales, None, layer.reduce_range)


def quantized_vocab_rows(module: nn.Module, start: int, count: int) -> nn.Module:
    """Rows ``[start, start + count)`` of a quantized embedding or LM head, padded with rows of
    zeros past the vocabulary (zero GGUF blocks; int8 zeros with scale 1)."""
    if isinstance(module, GGUFLinear):
        return GGUFLinear(padded_rows(module.blocks, start, count), module.fmt, module.in_features)
    if isinstance(module, Int8Linear):
        q, scales = module.int8_weight()
        return Int8Linear.from_int8(
            padded_rows(q, start, count), padded_rows(scales, start, count, 1.0), None, module.reduce_range
        )
    if not isinstance(module, QuantizedEmbedding):
        raise TypeError(f"cannot split {type(module).__name__} by vocabulary rows")
    head = None if module.head is None else quantized_vocab_rows(module.head, start, count)
    if module.fmt == "int8":
        assert module.scales is not None
        rows, scales = padded_rows(module.rows, start, count), padded_rows(module.scales, start, count, 1.0)
        return QuantizedEmbedding(rows, "int8", scales, head)
    rows = head.blocks if isinstance(head, GGUFLinear) else padded_rows(module.rows, start, count)
    return QuantizedEmbedding(rows, module.fmt, None, head)
