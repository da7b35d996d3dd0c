"""Tensor-parallel linear layers, float or quantized: a column-parallel layer is the rows of the whole
layer this rank owns (``column_shard``); a row-parallel one multiplies this rank's slice of the input
by its columns of the weight and sums the partial outputs of every rank (``RowParallelLinear``)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from radixlm.runtime.distributed import comm
from radixlm.runtime.distributed.partition import take_rows
from radixlm.runtime.layers.linear import Linear
from radixlm.runtime.layers.module import Module
from radixlm.runtime.layers.quantized_shards import QUANTIZED_LINEAR, quantized_columns, quantized_rows


def column_shard(linear: nn.Module, blocks: Sequence[tuple[int, int]]) -> nn.Module:
    """The layer keeping only the output rows in ``blocks`` (and their bias): the column-parallel
    part of a rank. A float ``Linear`` is cut in place; a quantized one is rebuilt from its rows."""
    if isinstance(linear, QUANTIZED_LINEAR):
        return quantized_rows(linear, blocks)
    linear.weight = nn.Parameter(take_rows(linear.weight.data, blocks), requires_grad=False)
    if getattr(linear, "bias", None) is not None:
        linear.bias = nn.Parameter(take_rows(linear.bias.data, blocks), requires_grad=False)
    if hasattr(linear, "out_sizes"):
        linear.out_sizes = [count for _, count in blocks]
    return linear


class RowParallelLinear(Module):
    """``y = all_reduce(part(x_r)) + b``: ``part`` holds this rank's columns ``W_r`` of the weight
    (float or quantized) and takes the matching slice ``x_r`` of the input; the bias is added once,
    after the sum."""

    def __init__(self, part: nn.Module, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.part = part
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=False)

    @classmethod
    def of(cls, linear: nn.Module, start: int, count: int, name: str, tp_size: int) -> RowParallelLinear:
        """Input columns ``[start, start + count)`` of ``linear`` (``name`` for errors)."""
        bias = getattr(linear, "bias", None)
        if isinstance(linear, QUANTIZED_LINEAR):
            return cls(quantized_columns(linear, start, count, name, tp_size), bias)
        part = Linear(count, linear.weight.shape[0])
        part.weight = nn.Parameter(
            linear.weight.data.narrow(1, start, count).contiguous(), requires_grad=False
        )
        return cls(part, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = comm.all_reduce(self.part(x))
        return y if self.bias is None else y + self.bias
