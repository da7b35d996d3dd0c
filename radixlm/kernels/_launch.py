"""Small helpers shared by the Triton launchers (no Triton import here)."""

from __future__ import annotations

import torch


def use_triton(x: torch.Tensor) -> bool:
    """The rule every dispatch point follows: the Triton kernel for CUDA tensors, the torch
    reference elsewhere (Triton's CPU interpreter is for tests, far too slow to serve)."""
    return x.is_cuda


def next_power_of_2(n: int) -> int:
    """Smallest power of two ``>= n`` (and ``>= 1``)."""
    return 1 << max(0, int(n) - 1).bit_length()


def dot_precision(dtype: torch.dtype) -> str:
    """``tl.dot`` input precision: exact fp32 products for fp32 inputs (no TF32), native otherwise."""
    return "ieee" if dtype == torch.float32 else "tf32"


def num_sms(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device; a small stand-in elsewhere (interpreter)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4
