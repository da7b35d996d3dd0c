"""A mixture-of-experts block under tensor parallelism: every rank routes alike (the router is
whole on each rank and its input is the same everywhere) and runs all experts on its slice of their
intermediate size (``GroupedExperts.shard``); the partial outputs are summed over the ranks."""

from __future__ import annotations

import torch

from radixlm.runtime.distributed import comm
from radixlm.runtime.layers.module import Module
from radixlm.runtime.layers.moe import SparseMoeBlock


class RowParallelSparseMoe(Module):
    """``all_reduce(block(x))`` with ``block``'s experts cut to this rank's intermediate units."""

    def __init__(self, block: SparseMoeBlock, start: int, count: int) -> None:
        super().__init__()
        block.experts = block.experts.shard(start, count)
        self.block = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return comm.all_reduce(self.block(x))
