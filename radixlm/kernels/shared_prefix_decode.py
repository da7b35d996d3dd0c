"""Decode attention for a batch whose requests share a cached prefix (cascade attention).

The radix cache gives requests that share a prompt prefix the *same* KV slots for it. Plain decode
attention still gathers and reads those keys once per request; here the shared part is read once
for the whole batch (one matrix product against all queries), the private suffixes are attended
per request, and the two partial softmaxes are merged by their log-sum-exp. Mathematically the
same attention as :func:`decode_attention_torch`.
"""
from __future__ import annotations

import torch


def common_slot_prefix_len(req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, limit: int) -> int:
    """Length of the slot prefix shared by every request's row (at most ``limit``)."""
    if limit <= 0 or req_pool_indices.numel() < 2:
        return 0
    rows = req_to_token[req_pool_indices, :limit]
    same = (rows == rows[:1]).all(dim=0)
    if bool(same.all()):
        return limit
    return int(torch.argmin(same.to(torch.int8)))


def _partial_attention(scores: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Unnormalised softmax attention: returns (max, sum of exp, exp-weighted values)."""
    m = scores.amax(dim=-1, keepdim=True)
    e = torch.exp(scores - m)
    return m, e.sum(dim=-1, keepdim=True), e @ v


def decode_attention_shared_prefix_torch(
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    sm_scale: float,
    shared_len: int,
    max_seq_len: int,
) -> torch.Tensor:
    """``q``: ``[bs, Hq, D]``; the first ``shared_len`` slots of every row are identical and every
    request has at least one key past them. Returns ``[bs, Hq, D]``."""
    bs, num_q_heads, head_dim = q.shape
    num_kv_heads = k_buffer.shape[1]
    group = num_q_heads // num_kv_heads
    qg = q.view(bs, num_kv_heads, group, head_dim).permute(1, 0, 2, 3).reshape(num_kv_heads, bs * group, head_dim)

    # Shared prefix: one gather, one product for all queries: [Hkv, bs*G, P]
    prefix_slots = req_to_token[req_pool_indices[0], :shared_len]
    kp = k_buffer[prefix_slots].to(q.dtype).permute(1, 2, 0).contiguous()  # [Hkv, D, P]
    vp = v_buffer[prefix_slots].to(q.dtype).transpose(0, 1)  # [Hkv, P, D]
    m_p, l_p, o_p = _partial_attention((qg @ kp) * sm_scale, vp)  # [Hkv, bs*G, *]

    # Private suffixes, padded: [bs, Hkv, G, Ls]
    suffix_len = max_seq_len - shared_len
    slots = req_to_token[req_pool_indices, shared_len:max_seq_len]
    ks = k_buffer[slots].to(q.dtype).permute(0, 2, 3, 1).contiguous()  # [bs, Hkv, D, Ls]
    vs = v_buffer[slots].to(q.dtype).transpose(1, 2)  # [bs, Hkv, Ls, D]
    q4 = q.view(bs, num_kv_heads, group, head_dim)
    scores = (q4 @ ks) * sm_scale
    valid = torch.arange(suffix_len, device=q.device)[None, :] < (seq_lens - shared_len)[:, None]
    scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
    m_s, l_s, o_s = _partial_attention(scores, vs)  # [bs, Hkv, G, *]

    def as_batch_major(t: torch.Tensor) -> torch.Tensor:  # [Hkv, bs*G, x] -> [bs, Hkv, G, x]
        return t.view(num_kv_heads, bs, group, -1).permute(1, 0, 2, 3)

    m_p, l_p, o_p = as_batch_major(m_p), as_batch_major(l_p), as_batch_major(o_p)
    m = torch.maximum(m_p, m_s)
    a_p, a_s = torch.exp(m_p - m), torch.exp(m_s - m)
    out = (o_p * a_p + o_s * a_s) / (l_p * a_p + l_s * a_s)
    return out.reshape(bs, num_q_heads, head_dim)
