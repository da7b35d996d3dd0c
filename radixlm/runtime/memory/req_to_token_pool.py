"""Rows of KV slot indices, one per running request."""

from __future__ import annotations

import torch


class ReqToTokenPool:
    """A table ``[size + 1, max_context_len]`` of KV slot indices.

    A running request owns one row; ``req_to_token[row, i]`` is the KV slot of its token ``i``.
    Row 0 is reserved as the padding row (CUDA-graph padding points there) and is never handed out.
    """

    def __init__(self, size: int, max_context_len: int, device: str | torch.device = "cpu") -> None:
        self.size = size
        self.max_context_len = max_context_len
        self.req_to_token = torch.zeros((size + 1, max_context_len), dtype=torch.int64, device=device)
        self._free_rows: list[int] = list(range(size, 0, -1))

    def available_size(self) -> int:
        return len(self._free_rows)

    def alloc(self) -> int | None:
        """Take a free row, or None when all rows are in use."""
        return self._free_rows.pop() if self._free_rows else None

    def free(self, row: int) -> None:
        assert 0 < row <= self.size, f"bad row {row}"
        self._free_rows.append(row)

    def write(self, row: int, start: int, slots: torch.Tensor) -> None:
        """Record ``slots`` as the KV slots of tokens ``start .. start+len(slots)-1`` of ``row``."""
        self.req_to_token[row, start : start + slots.numel()] = slots
