"""Decode attention: one query token per request against its KV slots in the paged pool."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def decode_attention_torch(
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    sm_scale: float,
    max_seq_len: int | None = None,
) -> torch.Tensor:
    """Exact reference. ``q``: ``[bs, Hq, D]``; buffers ``[S, Hkv, D]``; returns ``[bs, Hq, D]``.

    Request ``i`` attends to the slots ``req_to_token[req_pool_indices[i], :seq_lens[i]]``.
    The KV of all requests is gathered into one padded ``[bs, L, Hkv, D]`` block and masked, so the
    whole batch is one attention call (a Python loop per request costs more than the math on CPU).
    """
    bs, num_q_heads, head_dim = q.shape
    num_kv_heads = k_buffer.shape[1]
    max_len = int(max_seq_len if max_seq_len is not None else int(seq_lens.max()))
    slots = req_to_token[req_pool_indices, :max_len]  # [bs, L]
    k = k_buffer[slots].to(q.dtype).transpose(1, 2)  # [bs, Hkv, L, D]
    v = v_buffer[slots].to(q.dtype).transpose(1, 2)
    valid = torch.arange(max_len, device=q.device)[None, :] < seq_lens[:, None]  # [bs, L]
    mask = valid[:, None, None, :]  # [bs, 1, 1, L]
    out = F.scaled_dot_product_attention(
        q.unsqueeze(2), k, v, attn_mask=mask, scale=sm_scale,
        enable_gqa=num_q_heads != num_kv_heads,
    )  # [bs, Hq, 1, D]
    return out.squeeze(2)


def decode_attention(
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    sm_scale: float,
    max_seq_len: int | None = None,
) -> torch.Tensor:
    """Dispatch point: Triton on CUDA, the torch reference elsewhere."""
    return decode_attention_torch(q, k_buffer, v_buffer, req_to_token, req_pool_indices, seq_lens,
                                  sm_scale, max_seq_len)
