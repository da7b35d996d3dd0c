"""RMSNorm, alone or fused with the residual add that precedes it in a transformer block.

Semantics follow Hugging Face's ``LlamaRMSNorm``: normalise in fp32, round to the input dtype,
then multiply by the weight (in the input dtype). ``x``/``residual``: ``[T, hidden]``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from radixlm.kernels import _launch
from radixlm.kernels._launch import next_power_of_2
from radixlm.kernels.cpu.build import decode_kernels_if_ready


def rmsnorm_torch(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Exact reference: ``weight * (x / sqrt(mean(x^2) + eps))`` with the HF rounding points."""
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * (xf * rstd).to(x.dtype)


def fused_add_rmsnorm_torch(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact reference: ``h = x + residual``; returns ``(rmsnorm(h), h)``."""
    h = x + residual
    return rmsnorm_torch(h, weight, eps), h


def _rmsnorm_triton(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor | None]:
    from radixlm.kernels._triton import rmsnorm as kernels

    x = x.contiguous()
    hidden = int(x.shape[-1])
    x2 = x.view(-1, hidden)
    out = torch.empty_like(x2, dtype=torch.promote_types(x.dtype, weight.dtype))
    res_in = residual.contiguous().view(-1, hidden) if residual is not None else x2
    res_out = torch.empty_like(x2) if residual is not None else x2
    if x2.shape[0]:
        kernels.rmsnorm_kernel[(x2.shape[0],)](
            x2,
            res_in,
            res_out,
            weight,
            out,
            eps,
            hidden,
            x2.stride(0),
            res_in.stride(0),
            res_out.stride(0),
            out.stride(0),
            HAS_RESIDUAL=residual is not None,
            BLOCK=next_power_of_2(hidden),
        )
    return out.view(x.shape), res_out.view(x.shape) if residual is not None else None


def rmsnorm_triton(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Triton version of :func:`rmsnorm_torch`: one program per token row."""
    return _rmsnorm_triton(x, None, weight, eps)[0]


def fused_add_rmsnorm_triton(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton version of :func:`fused_add_rmsnorm_torch`: the add and the norm in one pass."""
    out, h = _rmsnorm_triton(x, residual, weight, eps)
    assert h is not None
    return out, h


def _cpu_fp32(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return x.is_cpu and x.dtype == torch.float32 and weight.dtype == torch.float32


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The dispatch point: Triton on CUDA (``_launch.use_triton``); fp32 rows on the CPU take the
    one-pass C++ kernel once built (``cpu/rmsnorm.cpp``: ~10x cheaper than torch's ops for a decode
    step's rows, equal to the reference up to the summation order of the mean), else torch's
    ``F.rms_norm``; anything else :func:`rmsnorm_torch`."""
    if _launch.use_triton(x):
        return rmsnorm_triton(x, weight, eps)
    if _cpu_fp32(x, weight):
        kernels = decode_kernels_if_ready()
        if kernels is not None and x.dim() >= 2 and x.shape[-1] == weight.shape[0]:
            # per-head norms (q/k norms: [tokens, heads, head_dim]) are rows too
            rows = x.reshape(-1, x.shape[-1]).contiguous()
            return kernels.rmsnorm(rows, weight, eps).view(x.shape)
        return F.rms_norm(x, weight.shape, weight, eps)
    return rmsnorm_torch(x, weight, eps)


def fused_add_rmsnorm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The dispatch point of the fused add + RMSNorm, chosen as for :func:`rmsnorm`."""
    if _launch.use_triton(x):
        return fused_add_rmsnorm_triton(x, residual, weight, eps)
    if _cpu_fp32(x, weight) and residual.dtype == torch.float32:
        kernels = decode_kernels_if_ready()
        if kernels is not None and x.dim() == 2 and x.shape == residual.shape:
            return kernels.add_rmsnorm(x.contiguous(), residual.contiguous(), weight, eps)
        h = x + residual
        return F.rms_norm(h, weight.shape, weight, eps), h
    return fused_add_rmsnorm_torch(x, residual, weight, eps)
