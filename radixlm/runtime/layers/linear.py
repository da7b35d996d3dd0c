"""Linear and embedding layers with uninitialised parameters (weights always come from a checkpoint).

``MergedLinear`` fuses several projections of the same input (q/k/v, gate/up) into one matmul; the
checkpoint's separate tensors are copied into row blocks of its parameters by ``load_shard``.

Every product goes through ``linear``. On the CPU in fp32 a layer whose weight was packed for oneDNN
(``packed_weights.py``; the model runner packs every float layer at load) takes our threaded kernel
(``kernels/cpu/small_batch_linear.cpp``) up to ``PACKED_KERNEL_MAX_ROWS`` rows and the packed product
beyond. Unpacked layers take the kernel up to ``SMALL_BATCH_MAX_ROWS`` rows (``HEAD_MAX_ROWS`` for an
LM head) and ``F.linear`` beyond. Measured (``benchmarks/README.md``): torch runs a one-row product
on one thread and was 1.5-5x slower up to 16 rows on the model's shapes; on LM heads (vocabularies
of 8k-152k rows) it stayed 1.1-2.3x slower up to 128 rows. The packed product was slower than the
kernel up to 8 rows, even at 12, and faster from 16 on (``benchmarks/packed_linear.py``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.kernels.cpu.build import load_decode_kernels
from radixlm.runtime.layers.module import Module

SMALL_BATCH_MAX_ROWS = 16
HEAD_MAX_ROWS = 128
PACKED_KERNEL_MAX_ROWS = 12
_TORCH_LINEAR = F.linear


def packed_linear(
    x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, out_features: int
) -> torch.Tensor:
    """``x @ W^T (+ bias)`` by oneDNN's matmul, with ``packed = packed_weights.pack_weight(W)``;
    ``x`` ``[..., in]`` fp32."""
    rows = x.numel() // max(x.shape[-1], 1)
    flat = x.reshape(rows, x.shape[-1]).contiguous()
    out = torch.ops.mkldnn._linear_pointwise(flat, packed, bias, "none", [], "")
    return out.reshape(*x.shape[:-1], out_features)


def linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    max_rows: int = SMALL_BATCH_MAX_ROWS,
    packed: torch.Tensor | None = None,
) -> torch.Tensor:
    """``F.linear(x, weight, bias)``. fp32 on the CPU: up to ``max_rows`` rows take the threaded
    kernel; given ``packed`` (``pack_weight(weight)``), up to ``PACKED_KERNEL_MAX_ROWS`` rows do and
    more take the packed product."""
    if packed is not None:
        max_rows = PACKED_KERNEL_MAX_ROWS
    rows = x.numel() // max(x.shape[-1], 1)
    # F.linear rebound by someone else (deterministic inference's batch-invariant products) wins;
    # the kernels have no backward, so a product autograd would track stays torch's
    tracked = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)
    if (
        rows > 0
        and not tracked
        and F.linear is _TORCH_LINEAR
        and x.is_cpu
        and x.dtype == torch.float32
        and weight.dtype == torch.float32
        and weight.is_cpu
        and (bias is None or bias.dtype == torch.float32)
    ):
        if rows > max_rows:
            if packed is not None:
                return packed_linear(x, packed, bias, weight.shape[0])
            return F.linear(x, weight, bias)
        kernels = load_decode_kernels()
        if kernels is not None and weight.is_contiguous() and (bias is None or bias.is_contiguous()):
            out = kernels.small_batch_linear(x.reshape(rows, x.shape[-1]).contiguous(), weight, bias)
            return out.reshape(*x.shape[:-1], weight.shape[0])
    return F.linear(x, weight, bias)


class Linear(Module):
    """``y = x @ W^T (+ b)`` with ``W``: ``[out_features, in_features]``."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None
        self.packed: torch.Tensor | None = None  # ``weight`` packed for oneDNN (packed_weights.py)

    @classmethod
    def from_weight(cls, weight: torch.Tensor) -> Linear:
        """A bias-free layer over ``weight`` ``[out, in]`` (used as given: clone it to keep a copy)."""
        layer = cls(weight.shape[1], weight.shape[0])
        layer.weight = nn.Parameter(weight.detach(), requires_grad=False)
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias, packed=self.packed)

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """As the LM head: ``x @ W^T`` (quantized heads provide the same method)."""
        return linear(x, self.weight, max_rows=HEAD_MAX_ROWS, packed=self.packed)


class MergedLinear(Linear):
    """Several output blocks of sizes ``out_sizes`` computed by one matmul, concatenated."""

    def __init__(self, in_features: int, out_sizes: list[int], bias: bool = False) -> None:
        super().__init__(in_features, sum(out_sizes), bias)
        self.out_sizes = list(out_sizes)

    def load_shard(self, param_name: str, shard: int, tensor: torch.Tensor) -> None:
        """Copy ``tensor`` into block ``shard`` of ``self.weight`` or ``self.bias``."""
        param = getattr(self, param_name)
        start = sum(self.out_sizes[:shard])
        block = param.data.narrow(0, start, self.out_sizes[shard])
        copy_checked(block, tensor, f"{param_name}[{shard}]")


class Embedding(Module):
    """Token id -> row of ``weight`` ``[vocab_size, hidden_size]``."""

    def __init__(self, vocab_size: int, hidden_size: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, hidden_size))
        self.packed: torch.Tensor | None = None  # set when it serves as a tied LM head

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.weight)

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """As the tied LM head: ``x @ E^T``."""
        return linear(x, self.weight, max_rows=HEAD_MAX_ROWS, packed=self.packed)


def copy_checked(dst: torch.Tensor, src: torch.Tensor, name: str) -> None:
    """``dst.copy_(src)`` after checking the shapes agree (casting dtype and device)."""
    if tuple(dst.shape) != tuple(src.shape):
        raise ValueError(
            f"weight {name}: checkpoint shape {tuple(src.shape)} != model shape {tuple(dst.shape)}"
        )
    dst.copy_(src)
