"""Tensor-parallel linear layers: column-parallel weights are row slices of an ordinary ``Linear``
(``shard_rows``); a row-parallel layer multiplies its input slice and sums the partial outputs of
every rank with an all-reduce."""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.distributed import comm


def take_rows(t: torch.Tensor, blocks: Sequence[tuple[int, int]]) -> torch.Tensor:
    """The rows ``[start, start + count)`` of each block, concatenated."""
    return torch.cat([t.narrow(0, start, count) for start, count in blocks]).contiguous()


def shard_rows(linear: nn.Module, blocks: Sequence[tuple[int, int]]) -> None:
    """Keep only the output rows in ``blocks`` (and their bias): the column-parallel part of a rank."""
    linear.weight = nn.Parameter(take_rows(linear.weight.data, blocks), requires_grad=False)
    if getattr(linear, "bias", None) is not None:
        linear.bias = nn.Parameter(take_rows(linear.bias.data, blocks), requires_grad=False)


class RowParallelLinear(nn.Module):
    """``y = all_reduce(x_r @ W_r^T) + b``: this rank holds columns ``W_r`` of the weight and the
    matching slice ``x_r`` of the input; the bias is added once, after the sum."""

    def __init__(self, linear: nn.Module, start: int, count: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(linear.weight.data.narrow(1, start, count).contiguous(),
                                   requires_grad=False)
        bias = getattr(linear, "bias", None)
        self.bias = None if bias is None else nn.Parameter(bias.data.clone(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = comm.all_reduce(F.linear(x, self.weight))
        return y if self.bias is None else y + self.bias
