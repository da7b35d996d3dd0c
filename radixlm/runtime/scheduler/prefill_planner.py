"""Admission: which waiting requests extend this step, under the token and KV budgets."""

from __future__ import annotations

import torch

from radixlm.runtime.scheduler.cache_manager import CacheManager
from radixlm.runtime.scheduler.priority import admission_order
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.server_args import ServerArgs

# NOTE: a waiting request that shares at least this many uncached tokens with a request admitted
# in the same step waits one step, so the shared part is computed once and then matched.
IN_BATCH_PREFIX_DEFER = 32
LPM_MAX_QUEUE = 256  # beyond this, matching every waiting request costs more than it saves


class PrefillPlanner:
    """Plans one extend batch: a chunked request first, then waiting requests by policy."""

    def __init__(self, args: ServerArgs, cache: CacheManager) -> None:
        if args.schedule_policy not in ("lpm", "fcfs"):
            raise ValueError(f"unknown schedule_policy {args.schedule_policy!r} (expected lpm or fcfs)")
        self.args = args
        self.cache = cache

    def decode_reservation(self, running: list[Req]) -> int:
        """Slots to keep for the decode growth of running requests."""
        ratio = self.args.new_token_ratio
        return int(sum(min(r.remaining_new_tokens(), 4096) * ratio for r in running))

    def order(self, waiting: list[Req]) -> tuple[list[Req], dict[int, int]]:
        """The candidates in policy order (the most urgent priority first when priority scheduling is
        on), and the cached prefix lengths already matched (by id)."""
        if self.args.schedule_policy == "fcfs" or len(waiting) > LPM_MAX_QUEUE:
            return admission_order(list(waiting), self.args), {}
        prefix = {id(r): self.cache.cached_prefix_len(r) for r in waiting}
        return admission_order(sorted(waiting, key=lambda r: -prefix[id(r)]), self.args), prefix

    def _lora_fits(self, req: Req, adapters: set[int]) -> bool:
        """Whether ``req``'s adapter keeps the running batch within ``max_loras_per_batch`` adapters."""
        return req.lora is None or id(req.lora) in adapters or len(adapters) < self.args.max_loras_per_batch

    def plan(
        self, waiting: list[Req], running: list[Req], chunked: Req | None, max_tokens: int | None = None
    ) -> list[Req]:
        """Admit requests (allocating their rows and slots); returns them in batch order.

        ``max_tokens`` caps the step's prompt tokens below the chunk size (a mixed step).
        ``waiting`` is not modified; the caller removes the admitted requests from it.
        """
        chunk_size = self.args.chunked_prefill_size
        token_budget = self.args.max_prefill_tokens
        if chunk_size > 0:
            token_budget = min(token_budget, chunk_size)
        if max_tokens is not None:
            token_budget = min(token_budget, max_tokens)
        kv_budget = self.cache.available_tokens() - self.decode_reservation(running)
        slots_left = self.args.max_running_requests - len(running)
        batch: list[Req] = []

        if chunked is not None:
            if self.cache.admit(chunked, token_budget):
                batch.append(chunked)
                token_budget -= chunked.extend_len
                kv_budget -= chunked.extend_len
            else:
                return batch

        # NOTE: deferring a request to share a prefix pays only when the prefix will be cached: with
        # the radix cache disabled the tracker matches nothing, so nobody waits.
        dedup = self.cache.prefix_tracker()
        candidates, matched = self.order(waiting)
        adapters = {id(r.lora) for r in [*running, *batch] if r.lora is not None}
        for req in candidates:
            if slots_left - len(batch) <= 0 or token_budget <= 0:
                break
            if not self._lora_fits(req, adapters):
                continue  # its adapter waits for a batch with a free LoRA slot
            # NOTE: lpm's lengths may be stale after an earlier admission evicted; they only size
            # the budgets here, and admit() matches again for real.
            cached = matched[id(req)] if id(req) in matched else self.cache.cached_prefix_len(req)
            fill_ids = req.cache_key(req.seq_len)
            shared = min(int(dedup.match_prefix(fill_ids, count=False).slots.numel()), req.max_prefix_len())
            if shared - cached >= IN_BATCH_PREFIX_DEFER:
                continue
            extend_len = req.seq_len - cached
            reserve = int(min(req.remaining_new_tokens(), 4096) * self.args.new_token_ratio)
            if extend_len + reserve > kv_budget and (batch or running):
                break
            max_extend = extend_len
            if extend_len > token_budget:
                if chunk_size > 0:
                    max_extend = token_budget  # this request becomes the chunked one
                elif batch:
                    break
            if not self.cache.admit(req, max_extend):
                break
            batch.append(req)
            token_budget -= req.extend_len
            kv_budget -= req.extend_len + reserve
            dedup.insert(fill_ids, torch.zeros(len(fill_ids), dtype=torch.int64))
            if req.lora is not None:
                adapters.add(id(req.lora))
            if req.extend_len < extend_len:
                break
        return batch
