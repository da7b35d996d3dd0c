"""Gated activations."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from radixlm.kernels.cpu.build import decode_kernels_if_ready


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` where ``gate_up`` is ``[..., 2 * d]`` = ``[gate | up]``; the dispatch point.

    Contiguous fp32 rows on the CPU take the one-pass C++ kernel once built
    (``cpu/silu_and_mul.cpp``: within a few ulp of torch's ops, one parallel region instead of two);
    elsewhere torch's ``silu`` and an in-place multiply."""
    if gate_up.is_cpu and gate_up.dtype == torch.float32 and gate_up.dim() == 2 and gate_up.is_contiguous():
        kernels = decode_kernels_if_ready()
        if kernels is not None:
            return kernels.silu_and_mul(gate_up)
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate).mul_(up)
