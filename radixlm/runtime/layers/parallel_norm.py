"""RMSNorm over a vector whose elements are split across tensor-parallel ranks: OLMo 2's and OLMoE's
q/k norms span the whole projection (all heads), and each rank holds only its heads' part.

Each rank sums the squares of its part, an all-reduce adds those sums (one float per token), and
every rank scales its part by the whole vector's rms, then by its slice of the weight."""

from __future__ import annotations

import torch
from torch import nn

from radixlm.runtime.distributed import comm
from radixlm.runtime.layers.module import Module


class ParallelRMSNorm(Module):
    """This rank's part of ``RMSNorm(full_size)``: ``weight`` is its slice of the whole weight.

    ``copies``: how many ranks hold each element (more than 1 where a KV head is replicated
    because there are fewer KV heads than ranks), so the all-reduced sum counts each once."""

    def __init__(self, weight: torch.Tensor, eps: float, full_size: int, copies: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight.detach().clone(), requires_grad=False)
        self.eps, self.full_size, self.copies = eps, full_size, copies

    @classmethod
    def of(cls, norm: nn.Module, start: int, count: int, copies: int) -> ParallelRMSNorm:
        """Elements ``[start, start + count)`` of ``norm`` (an ``RMSNorm`` over the whole vector)."""
        return cls(norm.weight.data.narrow(0, start, count), norm.eps, norm.weight.shape[0], copies)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # the rounding points of rmsnorm_torch: normalise in fp32, round to x's dtype, then the weight
        xf = x.float()
        squares = comm.all_reduce(xf.pow(2).sum(-1, keepdim=True))
        rstd = torch.rsqrt(squares / (self.copies * self.full_size) + self.eps)
        return self.weight * (xf * rstd).to(x.dtype)
