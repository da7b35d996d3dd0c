"""``LoRABatch``: a forward's adapter rows grouped by slot, planned once per batch for every layer.

Each wrapped projection (``LoRALinear``) reads the same plan, so the grouping (sorting the rows by
slot, the index tensors, the group boundaries) is done once per forward, not per layer. Two layouts:

- **padded** (decode-sized batches, most steps): the rows of slots ``lo .. hi-1`` in a
  ``[groups, width]`` grid, group ``g`` holding slot ``lo + g``'s rows, padded to the largest group.
  A layer then runs one batched product against all slots' stacked ``A`` and one per output slice
  against the stacked ``B'`` (``torch.bmm``), whatever the number of adapters. Pad places read row 0
  and are zeroed by ``mask`` after the ``A`` product. Chosen while the pads are at most half the rows.
- **segments** (uneven prefills): each slot's rows a contiguous ``slice`` (of the token axis, or of
  the rows gathered in ``rows`` order), one product pair per slot: no pad work, a loop over slots.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class PaddedGroups:
    """The padded layout: group ``g`` of the ``[groups, width]`` grid is slot ``slots.start + g``."""

    slots: slice
    width: int
    mask: torch.Tensor | None  # [groups, width, 1]: 1.0 a real row, 0.0 a pad; None: no pads


@dataclass
class LoRABatch:
    """The current forward's adapter rows (see the module docstring). Rows of no slot (the base
    model's requests) get no update; with neither ``segments`` nor ``padded`` no row does."""

    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    segments: list[tuple[int, slice]] = field(default_factory=list)
    padded: PaddedGroups | None = None
    rows: torch.Tensor | None = None  # token row of each gathered (or padded) place; None: in place

    @property
    def empty(self) -> bool:
        return not self.segments and self.padded is None

    def plan(self, slots: Sequence[int] | None, tokens_per_req: Sequence[int]) -> None:
        """Re-plan for a forward where request ``i`` has ``tokens_per_req[i]`` consecutive tokens under
        slot ``slots[i]`` (-1: the base model)."""
        self.segments, self.padded, self.rows = [], None, None
        if not slots or all(s < 0 for s in slots):
            return
        if len(slots) != len(tokens_per_req):
            raise ValueError(f"{len(slots)} LoRA slots for {len(tokens_per_req)} requests")
        by_slot: dict[int, list[int]] = {}
        start = 0
        for slot, n in zip(slots, tokens_per_req):
            if slot >= 0:
                by_slot.setdefault(slot, []).extend(range(start, start + n))
            start += n
        total = start
        count = sum(len(r) for r in by_slot.values())
        lo, hi = min(by_slot), max(by_slot) + 1
        width = max(len(r) for r in by_slot.values())
        if 2 * ((hi - lo) * width - count) <= count:
            self._plan_padded(by_slot, lo, hi, width, total)
        else:
            self._plan_segments(by_slot)

    def _plan_padded(self, by_slot: dict[int, list[int]], lo: int, hi: int, width: int, total: int) -> None:
        order: list[int] = []
        mask: list[float] = []
        for slot in range(lo, hi):
            rows = by_slot.get(slot, [])
            order.extend(rows)
            order.extend([0] * (width - len(rows)))
            mask.extend([1.0] * len(rows) + [0.0] * (width - len(rows)))
        has_pads = len(order) != sum(len(r) for r in by_slot.values())
        mask_t = None
        if has_pads:
            mask_t = torch.tensor(mask, dtype=torch.float32, device=self.device).view(hi - lo, width, 1)
        self.padded = PaddedGroups(slice(lo, hi), width, mask_t)
        if has_pads or order != list(range(total)):
            self.rows = torch.tensor(order, dtype=torch.int64, device=self.device)

    def _plan_segments(self, by_slot: dict[int, list[int]]) -> None:
        if all(rows[-1] - rows[0] + 1 == len(rows) for rows in by_slot.values()):
            self.segments = [(slot, slice(rows[0], rows[-1] + 1)) for slot, rows in sorted(by_slot.items())]
            return
        order: list[int] = []
        for slot, rows in sorted(by_slot.items()):
            self.segments.append((slot, slice(len(order), len(order) + len(rows))))
            order.extend(rows)
        self.rows = torch.tensor(order, dtype=torch.int64, device=self.device)
