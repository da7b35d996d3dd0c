"""Row groups of a decode batch: runs of consecutive rows that extend one request (a speculative
verify step's draft positions), which the in-place decode-attention kernel reads in one pass."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class RowGroups:
    """``starts``: int64 ``[groups + 1]``, the first row of each group and the batch size last.

    The rows of a group share their ``req_to_token`` row (so the same slots for the keys they have in
    common) and may differ in length (row ``j`` of a verify group has ``j`` more keys than row 0)."""

    starts: torch.Tensor
    rows: int

    @classmethod
    def of(cls, sizes: list[int], req_pool_indices: list[int]) -> RowGroups | None:
        """The groups of ``sizes`` consecutive rows each, checked against the rows' ``req_pool_indices``;
        None when no group has two rows (nothing to share)."""
        if any(n < 1 for n in sizes) or sum(sizes) != len(req_pool_indices):
            raise ValueError(
                f"row group sizes {sizes} must be positive and add up to the batch's "
                f"{len(req_pool_indices)} rows"
            )
        starts = [0]
        for n in sizes:
            first = starts[-1]
            if any(r != req_pool_indices[first] for r in req_pool_indices[first : first + n]):
                raise ValueError(f"the rows {first}..{first + n - 1} of a row group hold different requests")
            starts.append(first + n)
        if max(sizes, default=1) < 2:
            return None
        return cls(torch.tensor(starts, dtype=torch.int64), len(req_pool_indices))
