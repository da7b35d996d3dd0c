"""Random paged KV layouts for the attention kernel tests: shuffled slots, holes, shared rows."""

from __future__ import annotations

from typing import NamedTuple

import torch


class PagedKV(NamedTuple):
    k_buffer: torch.Tensor  # [num_slots + 1, Hkv, D]
    v_buffer: torch.Tensor
    req_to_token: torch.Tensor  # [rows, max_context]
    req_pool_indices: torch.Tensor  # [bs]
    seq_lens: list[int]


def random_paged_kv(
    seq_lens: list[int],
    num_kv_heads: int,
    head_dim: int,
    device: torch.device,
    seed: int = 0,
    max_context: int = 160,
) -> PagedKV:
    """K/V for ``len(seq_lens)`` requests in a pool twice as large as needed.

    Each request's slots are a random, non-contiguous subset of the pool (slot 0 is never used),
    and the requests sit in shuffled ``req_to_token`` rows (row 0 stays the dummy).
    """
    gen = torch.Generator().manual_seed(seed)
    total = sum(seq_lens)
    num_slots = 2 * total + 8
    k_buffer = torch.randn(num_slots + 1, num_kv_heads, head_dim, generator=gen)
    v_buffer = torch.randn(num_slots + 1, num_kv_heads, head_dim, generator=gen)
    slots = torch.randperm(num_slots, generator=gen)[:total] + 1
    rows = torch.randperm(len(seq_lens) + 3, generator=gen)[: len(seq_lens)] + 1
    req_to_token = torch.zeros(len(seq_lens) + 4, max_context, dtype=torch.int64)
    start = 0
    for row, n in zip(rows.tolist(), seq_lens):
        req_to_token[row, :n] = slots[start : start + n]
        start += n
    return PagedKV(
        k_buffer.to(device), v_buffer.to(device), req_to_token.to(device), rows.to(device), list(seq_lens)
    )
