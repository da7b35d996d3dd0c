"""The host tier (L2): a preallocated arena of KV rows shaped like the pool's slots."""

from __future__ import annotations

import torch

from radixlm.runtime.kv_tiers.copy_queue import CopyQueue, CopyTask
from radixlm.runtime.memory.kv_pool import KVPool, SlotAllocator


class HostArena:
    """K and V rows ``[num_layers, num_rows + 1, num_kv_heads, head_dim]`` in CPU memory.

    ``dtype`` may be narrower than the pool's (e.g. float16 under a float32 pool): rows are rounded on
    the way down and widened on the way back. ``torch.int8`` stores each token's head vector as 8-bit
    integers with one float32 scale (its absolute maximum / 127), a scale per row rather than per
    page because rows are handed out one token at a time. Row 0 is never handed out (as the pool's
    slot 0).
    """

    def __init__(self, pool: KVPool, num_rows: int, dtype: torch.dtype | None = None) -> None:
        if num_rows <= 0:
            raise ValueError(f"host KV tier: {num_rows} rows; it needs at least one")
        self.pool = pool
        self.dtype = dtype or pool.dtype
        self.num_rows = num_rows
        shape = (pool.num_layers, num_rows + 1, pool.num_kv_heads, pool.head_dim)
        self.k = torch.empty(shape, dtype=self.dtype)
        self.v = torch.empty(shape, dtype=self.dtype)
        scaled = self.dtype == torch.int8
        scale_shape = (*shape[:-1], 1) if scaled else (0,)
        self.k_scale = torch.empty(scale_shape, dtype=torch.float32)
        self.v_scale = torch.empty(scale_shape, dtype=torch.float32)
        self.bytes_per_token = self.token_bytes(pool, self.dtype)
        self._rows = SlotAllocator(num_rows)
        self.copies = CopyQueue()

    @staticmethod
    def token_bytes(pool: KVPool, dtype: torch.dtype) -> int:
        """Host bytes of one token's K and V at ``dtype`` (with int8, its scales too)."""
        per = KVPool.bytes_per_slot(pool.num_layers, pool.num_kv_heads, pool.head_dim, dtype)
        return per + (2 * pool.num_layers * pool.num_kv_heads * 4 if dtype == torch.int8 else 0)

    @staticmethod
    def rows_for_bytes(pool: KVPool, nbytes: float, dtype: torch.dtype | None = None) -> int:
        """How many rows ``nbytes`` of host memory hold."""
        return int(nbytes // HostArena.token_bytes(pool, dtype or pool.dtype))

    def alloc(self, n: int) -> torch.Tensor | None:
        return self._rows.alloc(n)

    def free(self, rows: torch.Tensor) -> None:
        self._rows.free(rows)

    def available_size(self) -> int:
        return self._rows.available_size()

    def free_rows(self) -> torch.Tensor:
        return self._rows.free_slots()

    def clear(self) -> None:
        self._rows.clear()

    def close(self) -> None:
        """Stop the copy thread (after the copies queued)."""
        self.copies.close()

    def write(self, slots: torch.Tensor, rows: torch.Tensor) -> None:
        """Copy pool ``slots`` into host ``rows`` (every layer, K and V)."""
        rows = rows.cpu()
        for layer in range(self.pool.num_layers):
            k, v = self.pool.get_kv_buffer(layer)
            self._put(self.k, self.k_scale, layer, rows, k[slots].cpu())
            self._put(self.v, self.v_scale, layer, rows, v[slots].cpu())

    def _put(
        self, dst: torch.Tensor, scale: torch.Tensor, layer: int, rows: torch.Tensor, x: torch.Tensor
    ) -> None:
        if self.dtype != torch.int8:
            dst[layer].index_copy_(0, rows, x.to(self.dtype))
            return
        x = x.float()
        s = x.abs().amax(-1, keepdim=True).clamp_min(1e-30) / 127
        dst[layer].index_copy_(0, rows, (x / s).round_().clamp_(-127, 127).to(torch.int8))
        scale[layer].index_copy_(0, rows, s)

    def _get(self, src: torch.Tensor, scale: torch.Tensor, layer: int, rows: torch.Tensor) -> torch.Tensor:
        if self.dtype != torch.int8:
            return src[layer][rows]
        return src[layer][rows].float() * scale[layer][rows]

    def write_async(self, slots: torch.Tensor, rows: torch.Tensor) -> CopyTask:
        """``write`` on the copy thread; neither ``slots`` nor ``rows`` may be reused before the
        returned task's ``wait``."""
        return self.copies.submit(lambda: self.write(slots, rows))

    def read(self, rows: torch.Tensor, slots: torch.Tensor) -> None:
        """Copy host ``rows`` into pool ``slots``."""
        rows = rows.cpu()
        for layer in range(self.pool.num_layers):
            k, v = self.pool.get_kv_buffer(layer)
            k.index_copy_(0, slots, self._get(self.k, self.k_scale, layer, rows).to(k.device, k.dtype))
            v.index_copy_(0, slots, self._get(self.v, self.v_scale, layer, rows).to(v.device, v.dtype))
