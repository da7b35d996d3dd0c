"""``LoRALinear``: a base projection (any of our linear paths) plus per-adapter low-rank updates.

The base product runs once over the whole batch, whatever its format (float, int8, GGUF blocks,
stacked parts). Then the rows under an adapter get ``y[:, slice_i] += (x @ A_i^T) @ B_i'^T`` for each
targeted output slice ``i`` (``B'`` carries the scale). All slots' weights are kept stacked
(``SlotStack``), so a batch planned as padded groups (``LoRABatch``) costs one batched ``A`` product
and one batched ``B'`` product per output slice for all its adapters together; a segmented batch costs
one such pair per adapter. Multiply-adds per row and slice: ``r * (in + out_i)`` (ranks zero-padded
to the largest resident one) against the base's ``in * out``.
"""

from __future__ import annotations

import torch
from torch import nn

from radixlm.runtime.layers.module import Module
from radixlm.runtime.lora.batch_plan import LoRABatch
from radixlm.runtime.lora.slot_stack import SlotStack


class LoRALinear(Module):
    """``base(x)`` plus the low-rank updates of the adapters in ``batch`` (see the module docstring)."""

    def __init__(self, base: nn.Module, out_sizes: list[int], num_slots: int, batch: LoRABatch) -> None:
        super().__init__()
        self.base = base
        self.batch = batch
        self.stack = SlotStack(num_slots, out_sizes)

    def set_slot(self, slot: int, pairs: dict[int, tuple[torch.Tensor, torch.Tensor]] | None) -> None:
        """Put an adapter's ``{output slice: (A, B')}`` (on the device) into ``slot``; None clears it."""
        self.stack.set(slot, pairs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)
        batch = self.batch
        if batch.empty or not any(self.stack.active):
            return y
        # The low-rank products run on one thread: with torch's OpenMP team each product waits at a
        # barrier for its second thread, which our C++ kernels' pool or another process keeps off the
        # core (measured on the shared 2-core box: a decode step 40x the base's; 1024 prefill rows of
        # one qkv layer 69 ms on two threads, 15 ms on one; benchmarks/log/lora.md).
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            if batch.padded is not None:
                self._add_padded(x, y)
            else:
                self._add_segments(x, y)
        finally:
            torch.set_num_threads(threads)
        return y

    def _add_padded(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """One batched product per ``A`` and per output slice over the ``[groups, width]`` grid."""
        batch, stack = self.batch, self.stack
        padded = batch.padded
        assert padded is not None and stack.a is not None
        if not any(stack.active[s] for s in range(padded.slots.start, padded.slots.stop)):
            return
        xs = x if batch.rows is None else x[batch.rows]
        groups = padded.slots.stop - padded.slots.start
        xs = xs.reshape(groups, padded.width, -1).to(stack.a.dtype)
        low = torch.bmm(xs, stack.a[padded.slots])  # [groups, width, slices * r]
        if padded.mask is not None:
            low.mul_(padded.mask)
        r = stack.rank
        parts = [torch.bmm(low[:, :, i * r : (i + 1) * r], b[padded.slots]) for i, b in enumerate(stack.b)]
        # concatenated: bmm writing through out= into a column view of one buffer measured 2x slower
        delta = parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)
        flat = delta.view(groups * padded.width, -1).to(y.dtype)
        if batch.rows is None:
            y += flat
        else:
            y.index_add_(0, batch.rows, flat)

    def _add_segments(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """One ``A`` product and one ``B'`` product per slice for each adapter's contiguous rows."""
        batch, stack = self.batch, self.stack
        assert stack.a is not None
        xs = x if batch.rows is None else x[batch.rows]
        out = y if batch.rows is None else y.new_zeros(xs.shape[0], y.shape[-1])
        r = stack.rank
        for slot, rows in batch.segments:
            if not stack.active[slot]:
                continue
            low = xs[rows].to(stack.a.dtype) @ stack.a[slot]
            for i, (offset, size) in enumerate(stack.offsets):
                out[rows, offset : offset + size] += (low[:, i * r : (i + 1) * r] @ stack.b[i][slot]).to(
                    out.dtype
                )
        if batch.rows is not None:
            y.index_add_(0, batch.rows, out)

    def project(self, x: torch.Tensor) -> torch.Tensor:
        return self(x)
