"""Build the tiered prefix cache from the ``--enable-hierarchical-cache`` / ``--hicache-*`` flags."""

from __future__ import annotations

import torch

from radixlm.radix.tiered_cache import TieredRadixCache
from radixlm.runtime.executor.model_runner import resolve_dtype
from radixlm.runtime.kv_tiers.disk_store import DiskStore
from radixlm.runtime.kv_tiers.fingerprint import model_fingerprint
from radixlm.runtime.kv_tiers.host_arena import HostArena
from radixlm.runtime.memory.kv_pool import KVPool
from radixlm.runtime.server_args import ServerArgs


def host_tier_dtype(args: ServerArgs, pool: KVPool) -> torch.dtype:
    """``--hicache-dtype``: auto is the pool's element type."""
    if args.hicache_dtype == "int8":
        return torch.int8
    return (
        pool.dtype if args.hicache_dtype == "auto" else resolve_dtype(args.hicache_dtype, torch.device("cpu"))
    )


def disk_tier_dtype(args: ServerArgs, pool: KVPool) -> torch.dtype:
    """The host tier's element type, except that int8 host rows (scaled) are float16 pages on disk."""
    dtype = host_tier_dtype(args, pool)
    return torch.float16 if dtype == torch.int8 else dtype


def create_tiered_cache(args: ServerArgs, pool: KVPool) -> TieredRadixCache:
    """A ``TieredRadixCache`` over ``pool`` with a host arena of ``--hicache-size`` GB, or
    ``--hicache-ratio`` times the pool's bytes when the size is 0."""
    if args.tp_size > 1:
        raise ValueError("--enable-hierarchical-cache: not with tp_size > 1 (each rank holds its own KV)")
    dtype = host_tier_dtype(args, pool)
    if args.hicache_size > 0:
        nbytes = args.hicache_size * 1e9
    else:
        per_slot = KVPool.bytes_per_slot(pool.num_layers, pool.num_kv_heads, pool.head_dim, pool.dtype)
        nbytes = args.hicache_ratio * pool.num_slots * per_slot
    rows = HostArena.rows_for_bytes(pool, nbytes, dtype)
    if rows <= 0:
        raise ValueError(
            f"hicache: {nbytes:.0f} bytes hold no KV token (one takes more); raise --hicache-size"
        )
    host = HostArena(pool, rows, dtype)
    return TieredRadixCache(pool.allocator, host, args.hicache_write_policy, pool.device)


def create_disk_store(args: ServerArgs, pool: KVPool, model_path: str) -> DiskStore | None:
    """The ``--hicache-storage-dir`` tier (None without one), bounded by ``--hicache-storage-size`` GB."""
    if not args.hicache_storage_dir:
        return None
    if args.tp_size > 1:
        raise ValueError("--hicache-storage-dir: not with tp_size > 1 (each rank holds its own KV)")
    dtype = disk_tier_dtype(args, pool)
    fingerprint = model_fingerprint(model_path, pool, dtype)
    return DiskStore(args.hicache_storage_dir, int(args.hicache_storage_size * 1e9), pool, dtype, fingerprint)
