"""Quantized drop-in replacements for ``Linear`` and the (tied) ``Embedding``, CPU only.

- ``Int8Linear``: int8 weights per output channel, prepacked for FBGEMM; activations quantized per
  tensor on the fly (``torch.ops.quantized.linear_dynamic``).
- ``GGUFLinear``: GGUF blocks (Q4_0, Q4_1, Q8_0, Q4_K, Q6_K) in the file's byte layout, multiplied by
  ``radixlm.kernels.gguf_linear.GGUFProduct`` (our C++ kernel, activations quantized to int8 blocks
  of 32; torch on the dequantized blocks while the kernel is being built).
- ``QuantizedEmbedding``: token rows from int8 or GGUF blocks, dequantized only for the ids looked
  up; it also serves as the tied LM head (``project``) from the same bytes.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from torch import nn

from radixlm.kernels.cpu import gguf_blocks
from radixlm.kernels.gguf_linear import GGUFProduct
from radixlm.runtime.layers.module import Module


def _flat(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, x.shape[-1])


def quantize_int8_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Float ``[N, K]`` -> (int8 ``[N, K]``, float32 scales ``[N]``), symmetric, max |w| -> 127."""
    w = weight.detach().float()
    scales = (w.abs().amax(dim=1) / 127.0).clamp_min(1e-12)
    q = w / scales[:, None]  # one float temporary (an embedding can be a GB), rounded in place
    return q.round_().clamp_(-127, 127).to(torch.int8), scales


class Int8Linear(Module):
    """``y = x @ W^T (+ b)`` on FBGEMM's dynamic int8 kernel."""

    def __init__(
        self, weight: torch.Tensor, bias: torch.Tensor | None = None, reduce_range: bool = True
    ) -> None:
        super().__init__()
        q, scales = quantize_int8_per_channel(weight)
        self._setup(q, scales, bias, reduce_range)

    @classmethod
    def from_int8(
        cls,
        q: torch.Tensor,
        scales: torch.Tensor,
        bias: torch.Tensor | None = None,
        reduce_range: bool = True,
    ) -> Int8Linear:
        """A layer over already quantized rows ``q`` (int8 ``[N, K]``) with per-row ``scales``."""
        layer = cls.__new__(cls)
        nn.Module.__init__(layer)
        layer._setup(q, scales, bias, reduce_range)
        return layer

    def _setup(
        self, q: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None, reduce_range: bool
    ) -> None:
        self.out_features, self.in_features = q.shape
        # quantized tensor types are deprecated in torch 2.13; FBGEMM's packing still takes one
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            qweight = torch._make_per_channel_quantized_tensor(
                q.contiguous(), scales.double(), torch.zeros(len(scales), dtype=torch.long), 0
            )
            self._packed = torch.ops.quantized.linear_prepack(qweight, None)
        self.bias = None if bias is None else bias.detach().float().contiguous()
        self.reduce_range = reduce_range
        self._range_row = torch.zeros(1, self.in_features)
        self._range_row[0, 0], self._range_row[0, -1] = 1.0, -1.0

    def int8_weight(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(q, scales)``: the int8 rows ``[N, K]`` and float32 per-row scales, unpacked."""
        qweight, _ = torch.ops.quantized.linear_unpack(self._packed)
        return qweight.int_repr(), qweight.q_per_channel_scales().float()

    def row_max(self, flat: torch.Tensor) -> torch.Tensor:
        """Each input row's max ``|x|`` (the scale its int8 activations are quantized against)."""
        return flat.abs().amax(dim=1, keepdim=True).clamp_min(1e-12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # FBGEMM quantizes the whole input with one scale from its min and max. Scaling each row to
        # max |x| = 1 and adding a row [1, -1, 0, ...] pins that range to [-1, 1]: every token gets
        # its own scale (one token's outliers cost the others nothing) and a token's result does not
        # depend on the batch it is in (int32 accumulation is exact in any order).
        flat = _flat(x).float()
        row_max = self.row_max(flat)
        scaled = torch.cat([flat / row_max, self._range_row]).contiguous()
        y = torch.ops.quantized.linear_dynamic(scaled, self._packed, self.reduce_range)[:-1]
        y.mul_(row_max)
        if self.bias is not None:
            y += self.bias
        return y.reshape(*x.shape[:-1], self.out_features)

    def weight_bytes(self) -> int:
        return self.out_features * self.in_features + 4 * self.out_features

    def project(self, x: torch.Tensor) -> torch.Tensor:
        return self(x)


class GGUFLinear(Module):
    """``y = x @ W^T (+ b)`` with ``W`` as GGUF blocks ``[N, K / block elements * block bytes]`` of
    ``fmt`` (32 elements per block, 256 for the K-quants)."""

    def __init__(
        self,
        blocks: torch.Tensor,
        fmt: str,
        in_features: int,
        bias: torch.Tensor | None = None,
        release: Callable[[], None] | None = None,
    ) -> None:
        """``release``: drops the file pages behind ``blocks`` once the kernel reads a copy of its own
        (``GGUFProduct``)."""
        super().__init__()
        if blocks.dtype != torch.uint8 or blocks.shape[1] != gguf_blocks.row_bytes(fmt, in_features):
            raise ValueError(
                f"{fmt} blocks of shape {tuple(blocks.shape)} do not fit in_features {in_features}"
            )
        self.fmt, self.in_features, self.out_features = fmt, in_features, blocks.shape[0]
        self.register_buffer("blocks", blocks.contiguous(), persistent=False)
        self.bias = None if bias is None else bias.detach().float().contiguous()
        # the blocks are fixed from here on: checked once, each call checks only its activations
        self._product = GGUFProduct(self.blocks, fmt, in_features, release)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.dim() == 2
        rows = x if flat else _flat(x)
        y = self._product(rows if rows.dtype == torch.float32 else rows.float())
        if self.bias is not None:
            y += self.bias
        return y if flat else y.reshape(*x.shape[:-1], self.out_features)

    def weight_bytes(self) -> int:
        return self.blocks.numel()

    def project(self, x: torch.Tensor) -> torch.Tensor:
        return self(x)


class QuantizedEmbedding(Module):
    """Token embedding stored quantized; ``head`` (a ``GGUFLinear``/``Int8Linear`` over the same
    matrix), when given, makes it usable as the tied LM head through ``project``."""

    def __init__(
        self,
        rows: torch.Tensor,
        fmt: str,
        scales: torch.Tensor | None = None,
        head: GGUFLinear | Int8Linear | None = None,
    ) -> None:
        super().__init__()
        self.head, self.fmt = head, fmt
        # GGUF: the head's own block buffer (one copy); int8: int8 rows + per-row scales
        self.register_buffer("rows", rows, persistent=False)
        self.register_buffer("scales", scales, persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        flat = ids.reshape(-1)  # index_select: a flat row copy, cheaper than advanced indexing
        if self.fmt == "int8":
            assert self.scales is not None
            rows = self.rows.index_select(0, flat).float() * self.scales.index_select(0, flat)[:, None]
        else:
            rows = gguf_blocks.dequantize(self.rows.index_select(0, flat), self.fmt)
        return rows.reshape(*ids.shape, -1)

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """``x @ E^T``: logits through the tied embedding matrix."""
        if self.head is None:
            raise RuntimeError("this embedding is not tied to an LM head")
        return self.head(x)
