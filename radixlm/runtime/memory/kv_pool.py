"""The paged KV cache: per-layer K and V buffers and the slot allocator."""

from __future__ import annotations

import torch

from radixlm.runtime.memory.lazy_zeros import lazy_zeros


class SlotAllocator:
    """A free list of KV slot indices (page size 1). Slot 0 is the reserved dummy write target."""

    def __init__(self, num_slots: int, device: str | torch.device = "cpu") -> None:
        self.num_slots = num_slots
        self.device = device
        self.clear()

    def clear(self) -> None:
        self._free = torch.arange(1, self.num_slots + 1, dtype=torch.int64, device=self.device)
        self._freed_chunks: list[torch.Tensor] = []

    def _merge(self) -> None:
        if self._freed_chunks:
            self._free = torch.cat([self._free, *self._freed_chunks])
            self._freed_chunks = []

    def available_size(self) -> int:
        return int(self._free.numel()) + sum(int(c.numel()) for c in self._freed_chunks)

    def alloc(self, n: int) -> torch.Tensor | None:
        """Take ``n`` slots, or None (taking nothing) when fewer are free."""
        if n > int(self._free.numel()):
            self._merge()
            if n > int(self._free.numel()):
                return None
        out, self._free = self._free[:n], self._free[n:]
        return out

    def free(self, slots: torch.Tensor) -> None:
        if slots.numel():
            self._freed_chunks.append(slots.to(torch.int64))

    def free_slots(self) -> torch.Tensor:
        """All free slot indices (for integrity checks)."""
        self._merge()
        return self._free


class KVPool:
    """K and V buffers ``[num_slots + 1, num_kv_heads, head_dim]`` per layer, plus the allocator."""

    def __init__(
        self,
        num_slots: int,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: str | torch.device = "cpu",
    ) -> None:
        self.num_slots = num_slots
        self.num_layers = num_layers
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.dtype = dtype
        self.device = device
        shape = (num_slots + 1, num_kv_heads, head_dim)
        self.k_buffers = [lazy_zeros(shape, dtype, device) for _ in range(num_layers)]
        self.v_buffers = [lazy_zeros(shape, dtype, device) for _ in range(num_layers)]
        self.allocator = SlotAllocator(num_slots, device)

    @staticmethod
    def bytes_per_slot(num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
        return 2 * num_layers * num_kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()

    def get_kv_buffer(self, layer_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.k_buffers[layer_id], self.v_buffers[layer_id]

    def store(self, layer_id: int, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write the new tokens' ``k``/``v`` ``[T, Hkv, D]`` of layer ``layer_id`` into slots ``loc``
        (int64, distinct)."""
        # index_copy_ rather than ``buf[loc] = k``: on the CPU the indexed assignment opens an OpenMP
        # parallel region, which under OMP_WAIT_POLICY=PASSIVE costs ~60 us to wake the team for a
        # copy of a few KB (~55 us of 62 measured; 60 such writes a decode step on SmolLM2).
        # (``to`` only for another dtype: a no-op ``to`` is still a dispatched op, ~5 us at batch 1)
        if k.dtype != self.dtype:
            k, v = k.to(self.dtype), v.to(self.dtype)
        self.k_buffers[layer_id].index_copy_(0, loc, k)
        self.v_buffers[layer_id].index_copy_(0, loc, v)
