"""KV ownership: who holds each slot, and the one release path.

| tokens of a running request   | owner                               | freed when                         |
|-------------------------------|-------------------------------------|------------------------------------|
| ``[0, prefix_len)``           | the radix tree, locked by the req   | never by the req (the tree evicts) |
| ``[prefix_len, kv_len)``      | the request (private tail)          | ``release``: moved into the tree,  |
|                               |                                     | duplicates returned to the pool    |
| slots taken for this step     | the request, once the step's ``kv_len`` is advanced | as above            |

Invariant: every slot is at every moment in exactly one of: the allocator's free list, the tree,
or one running request's private tail. ``check_integrity`` verifies it.

With ``--disable-radix-cache`` the prefix cache is a ``NoRadixCache``: it never matches and never keeps
a slot, so ``prefix_len`` stays 0, every computed slot stays in the private tail and ``release`` frees
it. Nothing here asks which cache it has.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import torch

from radixlm.radix import PrefixCache, create_prefix_cache
from radixlm.radix.tiered_cache import TieredRadixCache
from radixlm.runtime.kv_tiers.disk_store import PAGE_TOKENS, DiskStore
from radixlm.runtime.memory.kv_pool import KVPool
from radixlm.runtime.memory.req_to_token_pool import ReqToTokenPool
from radixlm.runtime.multimodal.image_spans import chunk_end, prefix_end
from radixlm.runtime.scheduler.req import Req


class _NullFreer:
    def free(self, slots: torch.Tensor) -> None:
        pass


class CacheManager:
    """Rows, slots and the prefix cache, behind a narrow API the scheduler calls."""

    def __init__(
        self,
        req_to_token_pool: ReqToTokenPool,
        kv_pool: KVPool,
        disable_radix_cache: bool,
        tree: PrefixCache | None = None,
        disk: DiskStore | None = None,
    ) -> None:
        """``tree``: a prefix cache over ``kv_pool``'s allocator to use instead of the default one
        (a ``TieredRadixCache`` with the hierarchical cache on); ``disk``: the disk tier, which
        released requests' pages are saved to and admissions load from."""
        self.req_to_token_pool = req_to_token_pool
        self.kv_pool = kv_pool
        self.allocator = kv_pool.allocator
        self._new_prefix_cache = functools.partial(create_prefix_cache, disabled=disable_radix_cache)
        self.tree = tree if tree is not None else self._new_prefix_cache(self.allocator)
        self.tiered = tree if isinstance(tree, TieredRadixCache) else None
        self.disk = disk

    # ---- capacity ------------------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        return self.kv_pool.num_slots

    def available_tokens(self) -> int:
        """Slots that can be had now: free ones plus what the tree could evict."""
        return self.allocator.available_size() + self.tree.evictable_size()

    def alloc_slots(self, n: int) -> torch.Tensor | None:
        """Take ``n`` slots, evicting unlocked cache leaves if needed; None if impossible."""
        short = n - self.allocator.available_size()
        if short > 0:
            self.tree.evict(short)
        return self.allocator.alloc(n)

    def prefix_tracker(self) -> PrefixCache:
        """An empty prefix cache of this manager's kind that owns no slots (the planner records the
        prompts admitted in one step in it): with the cache disabled it matches nothing either."""
        return self._new_prefix_cache(_NullFreer())

    # ---- admission -----------------------------------------------------------------------------
    def cached_prefix_len(self, req: Req) -> int:
        """How much of the request's next extend the cache would serve (no locks taken)."""
        matched = self.tree.match_prefix(req.cache_key(req.max_prefix_len()), count=False).slots.numel()
        return prefix_end(req.image_spans, int(matched))

    def admit(self, req: Req, max_extend: int) -> bool:
        """Prepare the next extend of ``req``: a row, the locked cached prefix, new slots.

        On success ``req.extend_len`` tokens starting at ``req.kv_len`` are ready to compute.
        A request continuing a chunked prefill keeps its row and prefix. On failure nothing changes.
        """
        if req.row is not None:  # the next chunk of a chunked prefill
            slots = self._extend_slots(req, req.kv_len, max_extend)
            if slots is None:
                return False
            self.req_to_token_pool.write(req.row, req.kv_len, slots)
            return True
        row = self.req_to_token_pool.alloc()
        if row is None:
            return False
        prefix_ids = req.cache_key(req.max_prefix_len())
        if self.tiered is not None:
            self.tiered.load_back(prefix_ids, self.alloc_slots)
        if self._on_disk(req):
            self._load_from_disk(prefix_ids)
        match = self.tree.match_prefix(prefix_ids, count=not req.admitted_once)
        # NOTE: a match ending inside an image that attends both ways restarts at the image; the
        # node stays locked whole (its slots past the cut are recomputed and then deduplicated)
        prefix_len = prefix_end(req.image_spans, int(match.slots.numel()))
        self.tree.inc_lock(match.last_node)  # the eviction that makes room must not take the prefix
        slots = self._extend_slots(req, prefix_len, max_extend)
        if slots is None:
            self.tree.dec_lock(match.last_node)
            self.req_to_token_pool.free(row)
            return False
        req.row = row
        self.req_to_token_pool.write(row, 0, match.slots[:prefix_len])
        self.req_to_token_pool.write(row, prefix_len, slots)
        req.last_node = match.last_node
        req.prefix_len = req.kv_len = prefix_len
        if not req.admitted_once:
            req.cached_tokens = prefix_len
            req.admitted_once = True
        return True

    def prefetch(self, req: Req) -> None:
        """Start reading the disk tier's pages past what the tree holds of ``req``'s prompt (called
        when it is queued, so the reads overlap the batches that run before its admission)."""
        if not self._on_disk(req):
            return
        assert self.disk is not None
        prefix_ids = req.cache_key(req.max_prefix_len())
        match = self.tree.match_prefix(prefix_ids, count=False)
        self.disk.prefetch(prefix_ids, int(match.slots.numel()) + match.host_len)

    def _on_disk(self, req: Req) -> bool:
        """Whether ``req``'s KV goes to and comes from the disk tier: not under a LoRA adapter, whose
        radix namespace is numbered per process and would name another adapter after a restart."""
        return self.disk is not None and req.cache_namespace == 0

    def _load_from_disk(self, token_ids: list[int]) -> None:
        """Insert the disk tier's pages that continue the tree's match of ``token_ids`` (if any)."""
        assert self.disk is not None
        match = self.tree.match_prefix(token_ids, count=False)
        start = int(match.slots.numel())
        if match.host_len or len(token_ids) - start < PAGE_TOKENS:
            return
        end = self.disk.cached_len(token_ids, start)
        if end <= start:
            return
        self.tree.inc_lock(match.last_node)  # making room must not evict what the pages continue
        try:
            slots = self.alloc_slots(end - start)
            if slots is None:
                return
            loaded = self.disk.load(token_ids, start, end, slots)
            cached = start
            if loaded:
                cached = self.tree.insert(
                    token_ids[: start + loaded], torch.cat([match.slots, slots[:loaded]])
                )
            # the tree took slots[cached - start : loaded]; the rest (duplicates, unloaded) go back
            self.allocator.free(torch.cat([slots[: max(cached - start, 0)], slots[loaded:]]))
        finally:
            self.tree.dec_lock(match.last_node)

    def _extend_slots(self, req: Req, start: int, max_extend: int) -> torch.Tensor | None:
        """Slots for the next ``min(seq_len - start, max_extend)`` tokens (moved to the edge of an image
        span it would cut: ``image_spans.chunk_end``), which become ``req.extend_len``; None (nothing
        changed) when there is nothing to compute or no room."""
        end = start + min(req.seq_len - start, max_extend)
        extend_len = chunk_end(req.image_spans, start, end) - start
        slots = self.alloc_slots(extend_len) if extend_len > 0 else None
        if slots is not None:
            req.extend_len = extend_len
        return slots

    def alloc_decode_slot(self, reqs: list[Req]) -> torch.Tensor | None:
        """One new slot per request, recorded at position ``kv_len`` of its row."""
        slots = self.alloc_slots(len(reqs))
        if slots is None:
            return None
        table = self.req_to_token_pool.req_to_token
        rows = torch.tensor([r.row for r in reqs], dtype=torch.int64, device=table.device)
        cols = torch.tensor([r.kv_len for r in reqs], dtype=torch.int64, device=table.device)
        table[rows, cols] = slots
        return slots

    # ---- committing and releasing ---------------------------------------------------------------
    def commit_to_tree(self, req: Req) -> None:
        """Move the request's computed private tail into the tree and lock the new path.

        Called after each extend (so later requests reuse a prefix being generated, and a chunked
        prefill never recomputes) — ``cache_unfinished_req`` in SGLang's vocabulary. Afterwards the
        tree holds ``[0, prefix_len)``: everything computed, or nothing when it keeps nothing.
        """
        if req.kv_len == req.prefix_len:
            return
        row = _row_of(req)
        tokens = req.cache_key(req.kv_len)
        row_slots = self.req_to_token_pool.req_to_token[row, : req.kv_len]
        cached = self.tree.insert(tokens, row_slots.clone())
        match = self.tree.match_prefix(tokens, count=False)
        kept = int(match.slots.numel())
        # NOTE: slots in [prefix_len, cached) duplicate what another request inserted meanwhile;
        # a cache that kept nothing (``kept == 0``) took none and made none a duplicate.
        duplicates_end = min(cached, kept)
        if duplicates_end > req.prefix_len:
            self.allocator.free(row_slots[req.prefix_len : duplicates_end].clone())
        self.req_to_token_pool.write(row, 0, match.slots)
        self.tree.inc_lock(match.last_node)
        self.tree.dec_lock(req.last_node)
        req.last_node = match.last_node
        req.prefix_len = kept

    def free_step_slots(self, req: Req) -> None:
        """Give back the slots taken for this step (``[kv_len, kv_len + extend_len)`` of its row)
        without computing them: the step failed, whatever they hold must not enter the tree."""
        if req.row is not None and req.extend_len > 0:
            row = self.req_to_token_pool.req_to_token[req.row]
            self.allocator.free(row[req.kv_len : req.kv_len + req.extend_len].clone())
        req.extend_len = 0

    def release(self, req: Req) -> None:
        """The one release path (finish, abort, retraction): cache what was computed, free the rest."""
        if req.row is None:
            return
        self.commit_to_tree(req)
        if self.disk is not None and req.prefix_len and self._on_disk(req):
            self.disk.save(
                req.fill_ids[: req.prefix_len], self.req_to_token_pool.req_to_token[req.row, : req.prefix_len]
            )
        if req.kv_len > req.prefix_len:  # what the tree did not keep
            self.allocator.free(
                self.req_to_token_pool.req_to_token[req.row, req.prefix_len : req.kv_len].clone()
            )
        self.tree.dec_lock(req.last_node)
        self.req_to_token_pool.free(req.row)
        req.row = None
        req.last_node = None
        req.prefix_len = req.kv_len = 0

    def pin(self, req: Req) -> Any:
        """Keep the request's computed context locked in the tree beyond its release; returns the
        node to ``unpin`` later (None when the tree keeps none of it, e.g. the cache is disabled)."""
        if req.row is None:
            return None
        self.commit_to_tree(req)
        if req.prefix_len == 0:
            return None
        self.tree.inc_lock(req.last_node)
        return req.last_node

    def unpin(self, node: Any) -> None:
        if node is not None:
            self.tree.dec_lock(node)

    # ---- maintenance -----------------------------------------------------------------------------
    def flush(self) -> None:
        """Drop the whole prefix cache. Only when no request holds slots."""
        self.tree.reset()
        self.allocator.clear()

    def weights_changed(self, model_path: str) -> None:
        """New weights serve from now on: drop the tree and host tier (``flush``) and key the disk
        tier by the new model, so no KV computed by the old weights is ever loaded back."""
        self.flush()
        if self.disk is not None:
            from radixlm.runtime.kv_tiers.fingerprint import model_fingerprint

            self.disk.set_fingerprint(model_fingerprint(model_path, self.disk.pool, self.disk.dtype))

    def close(self) -> None:
        """Finish the tiers' queued copies and writes (a restarted server finds the disk's)."""
        if self.tiered is not None:
            self.tiered.close()
        if self.disk is not None:
            self.disk.flush()
            self.disk.close()

    def stats(self) -> dict:
        free = self.allocator.available_size()
        cached = self.tree.total_size()
        tree_stats = self.tree.stats()
        return {
            "kv_total": self.capacity,
            "kv_free": free,
            "kv_cached": cached,
            "kv_used": self.capacity - free - cached,
            "kv_evictable": self.tree.evictable_size(),
            "kv_protected": self.tree.protected_size(),
            "cache_hit_rate": tree_stats.get("hit_rate", 0.0),
            "cache_hit_tokens": tree_stats.get("hit_tokens", 0),
            "cache_requested_tokens": tree_stats.get("requested_tokens", 0),
            "cache_evicted_tokens": tree_stats.get("evicted_tokens", 0),
            **{k: v for k, v in tree_stats.items() if k.startswith("host_")},  # KV tiers
            **(self.disk.stats() if self.disk is not None else {}),
        }

    def check_integrity(self, running: Iterable[Req]) -> None:
        """Assert the ownership invariant: free + tree + private tails = capacity, no slot twice."""
        parts = [self.allocator.free_slots(), self.tree.all_slots()]
        table = self.req_to_token_pool.req_to_token
        for req in running:
            if req.row is not None:
                parts.append(table[req.row, req.prefix_len : req.kv_len])
        every = torch.cat([p.to(torch.int64).cpu() for p in parts]) if parts else torch.empty(0)
        expected = torch.arange(1, self.capacity + 1)
        if every.numel() != self.capacity or not torch.equal(every.sort().values, expected):
            counts = torch.bincount(every, minlength=self.capacity + 1)
            raise AssertionError(
                f"KV ownership broken: {every.numel()} slots accounted for, capacity {self.capacity}; "
                f"duplicated {int((counts[1:] > 1).sum())}, missing {int((counts[1:] == 0).sum())}, "
                f"free {parts[0].numel()}, tree {parts[1].numel()}"
            )
        self.tree.check_invariants()
        if self.tiered is not None:
            _check_host_rows(self.tiered)
        if self.disk is not None:
            self.disk.check_integrity()


def _check_host_rows(tree: TieredRadixCache) -> None:
    """Every host row is free or held by exactly one tree node."""
    every = torch.cat([tree.host.free_rows().to(torch.int64), tree.host_rows()])
    capacity = tree.host.num_rows
    if every.numel() != capacity or not torch.equal(every.sort().values, torch.arange(1, capacity + 1)):
        raise AssertionError(
            f"host tier ownership broken: {every.numel()} rows accounted for, capacity {capacity}; "
            f"tree {tree.host_size()}"
        )


def _row_of(req: Req) -> int:
    assert req.row is not None, f"{req.rid} holds no row"
    return req.row
