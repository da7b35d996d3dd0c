"""TieredRadixCache on a real KV pool and host arena: eviction writes down, a match loads back."""

from __future__ import annotations

import torch

from radixlm.radix.tiered_cache import TieredRadixCache
from radixlm.runtime.kv_tiers.host_arena import HostArena
from radixlm.runtime.memory.kv_pool import KVPool


def _setup(pool_slots: int, host_rows: int, policy: str = "write_back") -> tuple[KVPool, TieredRadixCache]:
    pool = KVPool(pool_slots, num_layers=2, num_kv_heads=2, head_dim=4, dtype=torch.float32)
    tree = TieredRadixCache(pool.allocator, HostArena(pool, host_rows), policy)
    return pool, tree


def _fill(pool: KVPool, tree: TieredRadixCache, ids: list[int]) -> torch.Tensor:
    """Compute ``ids`` (KV = a function of token and position) into fresh slots and insert them."""
    slots = pool.allocator.alloc(len(ids))
    assert slots is not None
    kv = torch.tensor(ids, dtype=torch.float32)[:, None, None] * 10 + torch.arange(len(ids))[:, None, None]
    kv = kv.expand(len(ids), 2, 4).contiguous()
    for layer in range(2):
        pool.store(layer, slots, kv + layer, -kv)
    cached = tree.insert(ids, slots)
    pool.allocator.free(slots[:cached])
    return kv


def _alloc(pool: KVPool, tree: TieredRadixCache):
    def alloc(n: int) -> torch.Tensor | None:
        short = n - pool.allocator.available_size()
        if short > 0:
            tree.evict(short)
        return pool.allocator.alloc(n)

    return alloc


def _pool_kv(pool: KVPool, slots: torch.Tensor) -> torch.Tensor:
    return torch.stack([pool.k_buffers[0][slots], pool.v_buffers[1][slots]])


def test_evicted_prefix_loads_back_with_the_same_kv():
    pool, tree = _setup(pool_slots=20, host_rows=40)
    a = list(range(1, 13))
    kv_a = _fill(pool, tree, a)
    alloc = _alloc(pool, tree)
    slots_b = alloc(12)  # forces eviction of a (written down to the host)
    assert slots_b is not None
    pool.allocator.free(slots_b)
    match = tree.match_prefix(a)
    assert match.slots.numel() < 12 and match.host_len == 12 - match.slots.numel()
    tree.check_invariants()
    assert match.slots.numel() == 0  # a was the only (least recently used) leaf
    assert tree.load_back(a, alloc) == 12
    match = tree.match_prefix(a)
    assert match.slots.numel() == 12 and match.host_len == 0
    expected = torch.stack([kv_a, -kv_a])
    assert torch.equal(_pool_kv(pool, match.slots), expected)
    tree.check_invariants()
    assert tree.stats()["host_hit_tokens"] == 12


def test_full_host_drops_least_recently_used_and_accounts_every_row():
    pool, tree = _setup(pool_slots=10, host_rows=10)
    alloc = _alloc(pool, tree)
    for base in (1, 100, 200, 300):
        _fill_via(pool, tree, alloc, list(range(base, base + 8)))
        tree.check_invariants()
        rows = torch.cat([tree.host.free_rows(), tree.host_rows()])
        assert torch.equal(rows.sort().values, torch.arange(1, 11))
    # the newest prefix is in the pool; the one before it on the host; older ones are gone
    assert tree.match_prefix(list(range(300, 308))).slots.numel() == 8
    assert tree.match_prefix(list(range(200, 208))).host_len == 8
    assert tree.match_prefix(list(range(1, 9))).host_len == 0


def _fill_via(pool: KVPool, tree: TieredRadixCache, alloc, ids: list[int]) -> None:
    slots = alloc(len(ids))
    assert slots is not None
    pool.allocator.free(slots)
    _fill(pool, tree, ids)


def test_insert_over_host_nodes_takes_the_new_slots_back_into_the_pool():
    pool, tree = _setup(pool_slots=16, host_rows=32)
    alloc = _alloc(pool, tree)
    a = list(range(1, 11))
    _fill(pool, tree, a)
    tree.evict(10)
    assert tree.match_prefix(a).host_len == 10
    slots = alloc(12)
    assert slots is not None
    assert tree.insert(a + [50, 51], slots) == 0  # the tree takes every slot
    match = tree.match_prefix(a + [50, 51])
    assert torch.equal(match.slots, slots) and match.host_len == 0
    tree.check_invariants()


def test_write_through_copies_at_insertion_so_eviction_writes_nothing():
    pool, tree = _setup(pool_slots=16, host_rows=32, policy="write_through")
    _fill(pool, tree, list(range(1, 11)))
    assert tree.stats()["host_written_tokens"] == 10
    tree.evict(10)
    assert tree.stats()["host_written_tokens"] == 10
    assert tree.match_prefix(list(range(1, 11))).host_len == 10
    tree.check_invariants()


def test_write_through_copies_off_the_critical_path_and_eviction_waits_for_them():
    pool, tree = _setup(pool_slots=16, host_rows=32, policy="write_through")
    tree.host.copies.pause()  # the copy thread holds still: only a completion check can run the copy
    a = list(range(1, 11))
    kv_a = _fill(pool, tree, a)
    assert tree.pending_copies() == 1  # insertion returned before the copy ran
    assert tree.evict(10) == 10
    garbage = pool.allocator.alloc(16)  # the evicted slots are reused at once ...
    assert garbage is not None
    for layer in range(2):
        pool.store(layer, garbage, torch.full((16, 2, 4), 7.0), torch.full((16, 2, 4), 7.0))
    pool.allocator.free(garbage)
    tree.host.copies.resume()
    tree.close()  # ... so the host rows must have been copied before eviction freed them
    assert tree.load_back(a, _alloc(pool, tree)) == 10
    match = tree.match_prefix(a)
    assert torch.equal(_pool_kv(pool, match.slots), torch.stack([kv_a, -kv_a]))
    tree.check_invariants()


def test_write_through_copy_is_waited_for_before_a_host_row_is_freed():
    pool, tree = _setup(pool_slots=16, host_rows=10, policy="write_through")
    tree.host.copies.pause()
    _fill(pool, tree, list(range(1, 11)))
    _fill(pool, tree, list(range(100, 106)))  # the host is full: the first copy's rows are taken over
    assert tree.pending_copies() == 1  # the first was waited for (run here) before its rows were freed
    assert tree.stats()["host_dropped_tokens"] == 10
    tree.host.copies.resume()
    tree.close()
    tree.check_invariants()


def test_int8_host_rows_keep_each_token_head_within_half_a_step_of_its_scale():
    pool = KVPool(16, num_layers=2, num_kv_heads=2, head_dim=8, dtype=torch.float32)
    arena = HostArena(pool, 12, torch.int8)
    slots = torch.arange(1, 11)
    torch.manual_seed(0)
    k = torch.randn(10, 2, 8) * torch.logspace(-3, 2, 10)[:, None, None]  # magnitudes 1e-3 .. 1e2
    for layer in range(2):
        pool.store(layer, slots, k + layer, -k)
    arena.write(slots, torch.arange(2, 12))
    for layer in range(2):
        pool.store(layer, slots, torch.zeros(10, 2, 8), torch.zeros(10, 2, 8))
    arena.read(torch.arange(2, 12), slots)
    for layer in range(2):
        for got, want in ((pool.k_buffers[layer][slots], k + layer), (pool.v_buffers[layer][slots], -k)):
            step = want.abs().amax(-1, keepdim=True) / 127
            assert ((got - want).abs() <= step / 2 + 1e-7).all()
    # 8 int8 bytes and one float32 scale per token, head, layer and K/V: vs 32 bytes at float32
    assert arena.bytes_per_token == 2 * 2 * 2 * (8 + 4)
    arena.close()
