"""Apply a packed vocabulary bitmask to logits (constrained decoding).

The bitmask is int32 ``[bs, ceil(vocab / 32)]``; bit ``j % 32`` of word ``j // 32`` set means token
``j`` is allowed (the layout outlines-core's ``write_mask_into`` fills). Disallowed logits become -inf.
"""

from __future__ import annotations

import sys

import numpy as np
import torch

from radixlm.kernels import _launch
from radixlm.kernels._launch import next_power_of_2

_BIT_SHIFTS: dict[torch.device, torch.Tensor] = {}


def unpack_bitmask(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """``[bs, words]`` int32 -> ``[bs, vocab_size]`` bool (True = allowed)."""
    if bitmask.device.type == "cpu" and sys.byteorder == "little":
        # numpy unpacks bytes ~10x faster than shifting int32 words in torch; on a little-endian
        # host byte k of a word holds its bits 8k..8k+7, so "little" bit order keeps token order.
        bits = np.unpackbits(bitmask.contiguous().numpy().view(np.uint8), axis=-1, bitorder="little")
        return torch.from_numpy(bits[:, :vocab_size]).view(torch.bool)
    shifts = _BIT_SHIFTS.get(bitmask.device)
    if shifts is None:
        shifts = torch.arange(32, dtype=torch.int32, device=bitmask.device)
        _BIT_SHIFTS[bitmask.device] = shifts
    bits = (bitmask.unsqueeze(-1) >> shifts) & 1  # [bs, words, 32]
    return bits.reshape(bitmask.shape[0], -1)[:, :vocab_size].bool()


def apply_token_bitmask_torch(
    logits: torch.Tensor, bitmask: torch.Tensor, rows: torch.Tensor | None = None
) -> None:
    """In place: ``logits[r, j] = -inf`` where token ``j`` is not allowed for row ``r``.

    ``rows`` (optional) selects which logits rows the bitmask rows apply to, so unconstrained rows of
    a mixed batch cost nothing.
    """
    vocab = logits.shape[-1]
    allowed = unpack_bitmask(bitmask, vocab)
    if rows is None:
        logits.masked_fill_(~allowed, float("-inf"))
    else:
        # In place on each row's view: no gather/scatter copy of the constrained rows.
        for j, r in enumerate(rows.tolist()):
            logits[r].masked_fill_(~allowed[j], float("-inf"))


def apply_token_bitmask_triton(
    logits: torch.Tensor, bitmask: torch.Tensor, rows: torch.Tensor | None = None
) -> None:
    """Triton version of :func:`apply_token_bitmask_torch`, same arguments and effect (in place).

    ``logits`` must have a unit stride along the vocabulary (rows may be strided).
    """
    assert logits.stride(-1) == 1, "logits need a contiguous vocabulary axis"
    num_rows = int(bitmask.shape[0])
    vocab = int(logits.shape[-1])
    if num_rows == 0 or vocab == 0:
        return
    from radixlm.kernels._triton import token_bitmask as kernels

    bitmask = bitmask.contiguous()
    block = min(4096 if logits.is_cuda else 256, next_power_of_2(vocab))
    kernels.apply_bitmask_kernel[(num_rows, -(-vocab // block))](
        logits,
        bitmask,
        rows if rows is not None else bitmask,
        vocab,
        logits.stride(0),
        bitmask.stride(0),
        HAS_ROWS=rows is not None,
        BLOCK=block,
    )


def apply_token_bitmask(
    logits: torch.Tensor, bitmask: torch.Tensor, rows: torch.Tensor | None = None
) -> None:
    """Dispatch point (``_launch.use_triton``): Triton on CUDA, the torch reference elsewhere."""
    fn = apply_token_bitmask_triton if _launch.use_triton(logits) else apply_token_bitmask_torch
    fn(logits, bitmask, rows)
