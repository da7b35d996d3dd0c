"""Linear and embedding layers with uninitialised parameters (weights always come from a checkpoint).

``MergedLinear`` fuses several projections of the same input (q/k/v, gate/up) into one matmul; the
checkpoint's separate tensors are copied into row blocks of its parameters by ``load_shard``.
Every product goes through ``radixlm.kernels.linear.linear`` (C++, oneDNN's packed product or torch).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.kernels.linear import HEAD_MAX_ROWS, linear
from radixlm.runtime.layers.module import Module


class Linear(Module):
    """``y = x @ W^T (+ b)`` with ``W``: ``[out_features, in_features]``."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None
        self.packed: torch.Tensor | None = None  # ``weight`` packed for oneDNN (packed_weights.py)
        self.weight_fp16: torch.Tensor | None = None  # ``weight`` in fp16 for few rows (half_weights.py)
        self.panels: torch.Tensor | None = None  # ``weight`` in column panels (panel_weights.py)

    @classmethod
    def from_weight(cls, weight: torch.Tensor) -> Linear:
        """A bias-free layer over ``weight`` ``[out, in]`` (used as given: clone it to keep a copy)."""
        layer = cls(weight.shape[1], weight.shape[0])
        layer.weight = nn.Parameter(weight.detach(), requires_grad=False)
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(
            x, self.weight, self.bias, packed=self.packed, half=self.weight_fp16, panels=self.panels
        )

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
