"""Vocabulary-parallel embedding and LM head: each rank holds ``ceil(vocab / tp)`` rows of the table
(the last rank's padded with zero rows), float or quantized. The embedding masks ids outside its
rows and sums the ranks' rows with an all-reduce; as an LM head the same rows give this rank's slice
of the logits."""

from __future__ import annotations

import torch
from torch import nn

from radixlm.runtime.distributed import comm
from radixlm.runtime.distributed.partition import padded_rows
from radixlm.runtime.layers.linear import Embedding, Linear
from radixlm.runtime.layers.module import Module
from radixlm.runtime.layers.quantized_shards import quantized_vocab_rows


def vocab_rows(module: nn.Module, start: int, count: int) -> nn.Module:
    """This rank's rows ``[start, start + count)`` of an embedding or LM head (``Embedding``,
    ``Linear`` or a quantized one), zero-padded past the vocabulary; it keeps ``project``."""
    if type(module) in (Embedding, Linear):
        part = Embedding(count, module.weight.shape[1])
        part.weight = nn.Parameter(padded_rows(module.weight.data, start, count), requires_grad=False)
        return part
    return quantized_vocab_rows(module, start, count)


class VocabParallelEmbedding(Module):
    """Token id -> row of the full table, from the rows this rank holds plus an all-reduce.

    ``part`` is the embedding over this rank's rows (``vocab_rows``), which start at ``start``.
    """

    def __init__(self, part: nn.Module, start: int, count: int) -> None:
        super().__init__()
        self.part, self.start, self.count = part, start, count

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        local = ids - self.start
        inside = (local >= 0) & (local < self.count)
        rows = self.part(torch.where(inside, local, torch.zeros_like(local)))
        return comm.all_reduce(rows * inside.unsqueeze(-1).to(rows.dtype))

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """As the LM head: this rank's slice of the logits (rank 0 gathers the slices)."""
        return self.part.project(x)
