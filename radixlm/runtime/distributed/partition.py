"""Which slice of a layer each tensor-parallel rank owns, and cutting a tensor's rows to it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TPShard:
    """Rank ``rank`` of ``size`` tensor-parallel ranks."""

    rank: int
    size: int

    def even_slice(self, total: int, what: str) -> tuple[int, int]:
        """``(start, count)`` of an axis of ``total`` split evenly; raises when it does not divide."""
        if total % self.size:
            raise ValueError(f"{what} ({total}) is not divisible by tp_size {self.size}")
        count = total // self.size
        return self.rank * count, count

    def padded_slice(self, total: int) -> tuple[int, int]:
        """``(start, count)`` of ``ceil(total / size)`` rows, the last rank's slice padded past ``total``."""
        count = -(-total // self.size)
        return self.rank * count, count

    def kv_heads(self, num_heads: int, num_kv_heads: int) -> tuple[int, int]:
        """``(first, count)`` of the KV heads this rank keeps: an even split when there are at least
        ``size`` of them, else the one head its query heads read (replicated across ranks)."""
        if num_kv_heads >= self.size:
            return self.even_slice(num_kv_heads, "num_key_value_heads")
        if self.size % num_kv_heads:
            raise ValueError(
                f"tp_size {self.size} must be a multiple of num_key_value_heads "
                f"{num_kv_heads} when it is larger"
            )
        first_q, _ = self.even_slice(num_heads, "num_attention_heads")
        return first_q // (num_heads // num_kv_heads), 1


def take_rows(t: torch.Tensor, blocks: Sequence[tuple[int, int]]) -> torch.Tensor:
    """The rows ``[start, start + count)`` of each block, concatenated."""
    return torch.cat([t.narrow(0, start, count) for start, count in blocks]).contiguous()


def padded_rows(t: torch.Tensor, start: int, count: int, fill: float = 0) -> torch.Tensor:
    """Rows ``[start, start + count)`` of ``t``, rows past its end filled with ``fill``."""
    out = t.new_full((count, *t.shape[1:]), fill)
    have = max(0, min(count, t.shape[0] - start))
    if have:
        out[:have] = t[start : start + have]
    return out
