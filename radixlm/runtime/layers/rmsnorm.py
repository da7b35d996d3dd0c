"""Root-mean-square layer norm, alone or fused with the residual add before it."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.kernels.cpu.build import load_decode_kernels
from radixlm.kernels.rmsnorm import fused_add_rmsnorm, rmsnorm
from radixlm.runtime.layers.module import Module


class RMSNorm(Module):
    """``weight * x / sqrt(mean(x^2) + eps)`` over the last dimension, computed in fp32 like the
    Hugging Face reference (``radixlm.kernels.rmsnorm``: Triton on CUDA, torch elsewhere).

    fp32 on the CPU takes the one-pass C++ kernel (``radixlm/kernels/cpu/rmsnorm.cpp``: ~10x cheaper
    than torch's ops for a decode step's rows, equal to the reference up to the summation order of
    the mean), or torch's own ``F.rms_norm`` where it cannot be built."""

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        if _cpu_fp32(x, weight):
            kernels = load_decode_kernels()
            if kernels is not None and x.dim() == 2:
                return kernels.rmsnorm(x.contiguous(), weight, self.eps)
            return F.rms_norm(x, weight.shape, weight, self.eps)
        return rmsnorm(x, weight, self.eps)

    def add_and_norm(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``h = x + residual``; returns ``(norm(h), h)``, in one pass on CUDA and (fp32) the CPU."""
        weight = self.weight
        if _cpu_fp32(x, weight) and residual.dtype == torch.float32:
            kernels = load_decode_kernels()
            if kernels is not None and x.dim() == 2 and x.shape == residual.shape:
                return kernels.add_rmsnorm(x.contiguous(), residual.contiguous(), weight, self.eps)
            h = x + residual
            return F.rms_norm(h, weight.shape, weight, self.eps), h
        return fused_add_rmsnorm(x, residual, weight, self.eps)


def _cpu_fp32(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return x.is_cpu and x.dtype == torch.float32 and weight.dtype == torch.float32
