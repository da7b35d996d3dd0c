"""Vocabulary-parallel embedding and LM head: each rank holds ``ceil(vocab / tp)`` rows of the table
(the last rank's padded with zeros). The embedding masks ids outside its rows and sums the ranks'
rows with an all-reduce; as an LM head the same rows give this rank's slice of the logits."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.distributed import comm


def padded_rows(weight: torch.Tensor, start: int, count: int) -> torch.Tensor:
    """Rows ``[start, start + count)`` of ``weight``, zero rows past its end."""
    out = weight.new_zeros((count, weight.shape[1]))
    have = max(0, min(count, weight.shape[0] - start))
    if have:
        out[:have] = weight[start:start + have]
    return out


class VocabParallelEmbedding(nn.Module):
    """Token id -> row of the full table, from the rows this rank holds plus an all-reduce.

    ``weight`` is this rank's ``[count, hidden]`` slice starting at row ``start``; an untied LM head
    is another instance used only through ``weight``.
    """

    def __init__(self, full_weight: torch.Tensor, start: int, count: int) -> None:
        super().__init__()
        self.start, self.count = start, count
        self.weight = nn.Parameter(padded_rows(full_weight, start, count), requires_grad=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        local = ids - self.start
        inside = (local >= 0) & (local < self.count)
        rows = F.embedding(torch.where(inside, local, torch.zeros_like(local)), self.weight)
        return comm.all_reduce(rows * inside.unsqueeze(-1).to(rows.dtype))

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """As the LM head: this rank's slice of the logits (rank 0 gathers the slices)."""
        return F.linear(x, self.weight)
