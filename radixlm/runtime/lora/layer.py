"""``LoRALinear``: a base projection (any of our linear paths) plus per-adapter low-rank updates.

The base product runs once over the whole batch, whatever its format (float, int8, GGUF blocks,
stacked parts). Then, for each adapter segment of the batch (``LoRABatch``), the segment's rows
``x_s`` get ``y_s[:, slice] += (x_s @ A^T) @ B'^T`` for each targeted output slice (``B'`` carries the
scale). The ``A`` matrices of all targeted slices (q/k/v, or gate/up) are stacked so one product
covers them: per segment that is one ``[n, in] x [in, sum r]`` product and one ``[n, r] x [r, out_i]``
per slice, ``n * r * (in + out)`` multiply-adds per slice against the base's ``n * in * out``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from radixlm.runtime.layers.module import Module


@dataclass
class LoRABatch:
    """The current forward's adapter segments: ``(slot, rows)`` with ``rows`` a ``slice`` of the token
    axis, or, when ``perm`` is set, of the tokens gathered in ``perm``'s order (each adapter's rows
    made contiguous). Rows in no segment (the base model's requests) get no update."""

    segments: list[tuple[int, slice]] = field(default_factory=list)
    perm: torch.Tensor | None = None


@dataclass
class SlotWeights:
    """One adapter's weights for one fused layer: stacked ``A`` and each slice's ``B'``."""

    a: torch.Tensor  # [sum of the targeted slices' ranks, in]
    slices: list[tuple[int, int, int, torch.Tensor]]  # (output offset, rank start, rank end, B' [out_i, r])


class LoRALinear(Module):
    """``base(x)`` plus the low-rank updates of the adapters in ``batch`` (see the module docstring)."""

    def __init__(self, base: nn.Module, out_sizes: list[int], num_slots: int, batch: LoRABatch) -> None:
        super().__init__()
        self.base = base
        self.out_sizes = list(out_sizes)
        self.batch = batch
        self.slots: list[SlotWeights | None] = [None] * num_slots

    def set_slot(self, slot: int, pairs: dict[int, tuple[torch.Tensor, torch.Tensor]] | None) -> None:
        """Put an adapter's ``{output slice: (A, B')}`` (on the device) into ``slot``; None clears it."""
        if not pairs:
            self.slots[slot] = None
            return
        offsets = [sum(self.out_sizes[:i]) for i in range(len(self.out_sizes))]
        a_parts, slices, r0 = [], [], 0
        for index in sorted(pairs):
            a, b = pairs[index]
            a_parts.append(a)
            slices.append((offsets[index], r0, r0 + a.shape[0], b))
            r0 += a.shape[0]
        self.slots[slot] = SlotWeights(torch.cat(a_parts).contiguous(), slices)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)
        perm = self.batch.perm
        if perm is None:  # each adapter's rows are contiguous: add in place
            for slot, rows in self.batch.segments:
                self._add(x[rows], y[rows], slot)
            return y
        # one gather of the adapters' rows in slot order, one scatter-add of their updates
        xs = x[perm]
        delta = torch.zeros(xs.shape[0], y.shape[-1], dtype=y.dtype, device=y.device)
        for slot, rows in self.batch.segments:
            self._add(xs[rows], delta[rows], slot)
        y.index_add_(0, perm, delta)
        return y

    def _add(self, xs: torch.Tensor, out: torch.Tensor, slot: int) -> None:
        """``out[:, slice] += (xs @ A^T) @ B'^T`` for each slice the slot's adapter targets."""
        weights = self.slots[slot]
        if weights is None:
            return  # this adapter leaves this projection alone
        low = xs.to(weights.a.dtype) @ weights.a.T  # [n, sum r]
        for offset, r0, r1, b in weights.slices:
            out[:, offset : offset + b.shape[0]] += (low[:, r0:r1] @ b.T).to(out.dtype)

    def project(self, x: torch.Tensor) -> torch.Tensor:
        return self(x)
