"""Root-mean-square layer norm, alone or fused with the residual add before it."""

from __future__ import annotations

import torch
from torch import nn

from radixlm.kernels.rmsnorm import fused_add_rmsnorm, rmsnorm
from radixlm.runtime.layers.module import Module


class RMSNorm(Module):
    """``weight * x / sqrt(mean(x^2) + eps)`` over the last dimension, computed in fp32 like the
    Hugging Face reference (``radixlm.kernels.rmsnorm`` picks the kernel: Triton, C++ or torch)."""

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rmsnorm(x, self.weight, self.eps)

    def add_and_norm(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``h = x + residual``; returns ``(norm(h), h)``, in one pass on CUDA and (fp32) the CPU."""
        return fused_add_rmsnorm(x, residual, self.weight, self.eps)
