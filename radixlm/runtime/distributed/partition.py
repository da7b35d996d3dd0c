"""Which slice of a layer each tensor-parallel rank owns."""
from __future__ import annotations

from dataclasses import dataclass


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
            raise ValueError(f"tp_size {self.size} must be a multiple of num_key_value_heads "
                             f"{num_kv_heads} when it is larger")
        first_q, _ = self.even_slice(num_heads, "num_attention_heads")
        return first_q // (num_heads // num_kv_heads), 1
