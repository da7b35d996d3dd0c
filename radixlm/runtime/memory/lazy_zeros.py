"""Zero-filled CPU buffers whose pages the kernel zeroes on first touch rather than at allocation."""

from __future__ import annotations

import math

import numpy as np
import torch

ALIGN = 64  # bytes: a cache line, as torch's own CPU allocator aligns


def lazy_zeros(
    shape: tuple[int, ...], dtype: torch.dtype, device: str | torch.device = "cpu"
) -> torch.Tensor:
    """``torch.zeros(shape, dtype=dtype, device=device)``, allocated on the CPU with ``calloc``
    (numpy's zeroed allocation): a large block is a fresh mapping the kernel hands out zeroed page by
    page when it is first written, where ``torch.zeros`` writes every page now (a 1 GiB KV pool: ~4 s
    of page faults at server start on a loaded machine, paid instead as its slots are first used).
    Other devices: ``torch.zeros``."""
    if torch.device(device).type != "cpu":
        return torch.zeros(shape, dtype=dtype, device=device)
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    raw = np.zeros(nbytes + ALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGN
    return torch.from_numpy(raw[start : start + nbytes]).view(dtype).view(shape)
