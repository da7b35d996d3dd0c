"""``SlotStack``: every device slot's LoRA weights for one fused projection, stacked for ``torch.bmm``.

``a`` is ``[num_slots, in, slices * r]``: slot ``s``'s ``A_i^T`` for output slice ``i`` in columns
``i * r .. i * r + r_i``; ``b[i]`` is ``[num_slots, r, out_i]``: its ``B_i'^T`` in rows ``0 .. r_i``. The
rank width ``r`` is the largest rank put in so far (smaller ranks and untargeted slices are zeros, which
add nothing), so a batch's slots ``lo .. hi-1`` are the views ``a[lo:hi]`` and ``b[i][lo:hi]``.
"""

from __future__ import annotations

import torch


class SlotStack:
    """The stacked ``A^T`` and ``B'^T`` of all slots of one layer (see the module docstring)."""

    def __init__(self, num_slots: int, out_sizes: list[int]) -> None:
        self.num_slots = num_slots
        self.out_features = sum(out_sizes)
        self.offsets = [(sum(out_sizes[:i]), size) for i, size in enumerate(out_sizes)]
        self.rank = 0
        self.a: torch.Tensor | None = None
        self.b: list[torch.Tensor] = []
        self.active = [False] * num_slots  # the slot's adapter targets this layer

    def set(self, slot: int, pairs: dict[int, tuple[torch.Tensor, torch.Tensor]] | None) -> None:
        """Put ``{output slice: (A [r, in], B' [out_i, r])}`` into ``slot``; None or empty clears it."""
        if not 0 <= slot < self.num_slots:
            raise ValueError(f"LoRA slot {slot} out of range (0 .. {self.num_slots - 1})")
        if self.a is not None:
            self.a[slot].zero_()
            for b in self.b:
                b[slot].zero_()
        self.active[slot] = bool(pairs)
        if not pairs:
            return
        for index, (a, b) in pairs.items():
            if not 0 <= index < len(self.offsets) or b.shape != (self.offsets[index][1], a.shape[0]):
                raise ValueError(f"LoRA pair for output slice {index} has shapes {a.shape} and {b.shape}")
        first = next(iter(pairs.values()))[0]
        self._grow(max(a.shape[0] for a, _ in pairs.values()), first)
        assert self.a is not None
        r = self.rank
        for index, (a, b) in pairs.items():
            self.a[slot, :, index * r : index * r + a.shape[0]] = a.T
            self.b[index][slot, : a.shape[0]] = b.T

    def _grow(self, rank: int, like: torch.Tensor) -> None:
        """Widen the stack to rank ``rank`` (keeping what is in it) when it is narrower."""
        if self.a is not None and rank <= self.rank:
            return
        on = dict(dtype=like.dtype, device=like.device)
        slices = len(self.offsets)
        a = torch.zeros(self.num_slots, like.shape[1], slices * rank, **on)
        b = [torch.zeros(self.num_slots, rank, size, **on) for _, size in self.offsets]
        if self.a is not None:
            old = self.rank
            for i in range(slices):
                a[:, :, i * rank : i * rank + old] = self.a[:, :, i * old : (i + 1) * old]
                b[i][:, :old] = self.b[i]
        self.a, self.b, self.rank = a, b, rank
