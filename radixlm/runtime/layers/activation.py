"""Gated activations."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from radixlm.kernels.cpu.build import load_decode_kernels


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` where ``gate_up`` is ``[..., 2 * d]`` = ``[gate | up]``.

    Contiguous fp32 rows on the CPU take the one-pass C++ kernel (``kernels/cpu/silu_and_mul.cpp``:
    within a few ulp of torch's ops, one parallel region instead of two); elsewhere, or where it
    cannot be built, torch's ``silu`` and an in-place multiply."""
    if gate_up.is_cpu and gate_up.dtype == torch.float32 and gate_up.dim() == 2 and gate_up.is_contiguous():
        kernels = load_decode_kernels()
        if kernels is not None:
            return kernels.silu_and_mul(gate_up)
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate).mul_(up)
