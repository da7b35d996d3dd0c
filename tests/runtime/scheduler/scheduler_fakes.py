"""Model-free pieces for scheduler unit tests: a real small KV pool and rows, requests, a fake forward."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from radixlm.runtime.memory.kv_pool import KVPool
from radixlm.runtime.memory.req_to_token_pool import ReqToTokenPool
from radixlm.runtime.sampling.sampling_params import SamplingParams
from radixlm.runtime.scheduler.cache_manager import CacheManager
from radixlm.runtime.scheduler.req import Req


def make_cache(
    num_slots: int = 64, rows: int = 4, max_context: int = 256, disabled: bool = False
) -> CacheManager:
    """A cache manager over a real (one layer, one head, width one) KV pool on the CPU."""
    kv_pool = KVPool(num_slots, num_layers=1, num_kv_heads=1, head_dim=1, dtype=torch.float32)
    return CacheManager(ReqToTokenPool(rows, max_context), kv_pool, disable_radix_cache=disabled)


def make_req(rid: str, input_ids: Iterable[int], **params) -> Req:
    params.setdefault("max_new_tokens", 8)
    return Req(rid, list(input_ids), SamplingParams(**params))


def compute_extend(cache: CacheManager, req: Req) -> None:
    """What the scheduler does after an extend forward: the computed tokens join the KV, then the tree."""
    req.kv_len += req.extend_len
    cache.commit_to_tree(req)


def ownership(cache: CacheManager, running: Iterable[Req]) -> tuple[int, int, int]:
    """``(free, tree, private)`` slot counts: the three owners a slot can have."""
    private = sum(r.kv_len - r.prefix_len for r in running if r.row is not None)
    return cache.allocator.available_size(), cache.tree.total_size(), private
