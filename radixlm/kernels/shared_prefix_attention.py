"""Attention for a batch whose requests share a cached prefix (cascade attention), decode and extend.

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


def _partial_attention(scores: torch.Tensor,
                       v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
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
    q4 = (q * sm_scale).view(bs, num_kv_heads, num_q_heads // num_kv_heads, head_dim)
    # NOTE: index_select + einsum on the gathered [keys, Hkv, D] layout: ~2x faster on CPU than
    # advanced indexing followed by permute().contiguous() into matmul layouts.

    # Shared prefix: one gather, one product for all queries.
    prefix_slots = req_to_token[req_pool_indices[0], :shared_len]
    kp = k_buffer.index_select(0, prefix_slots).to(q.dtype)  # [P, Hkv, D]
    vp = v_buffer.index_select(0, prefix_slots).to(q.dtype)
    s_p = torch.einsum("bhgd,phd->bhgp", q4, kp)
    m_p = s_p.amax(dim=-1, keepdim=True)
    e_p = torch.exp(s_p - m_p)
    l_p, o_p = e_p.sum(dim=-1, keepdim=True), torch.einsum("bhgp,phd->bhgd", e_p, vp)

    # Private suffixes, padded to the longest: [bs, Ls, Hkv, D].
    suffix_len = max_seq_len - shared_len
    flat = req_to_token[req_pool_indices, shared_len:max_seq_len].reshape(-1)
    ks = k_buffer.index_select(0, flat).to(q.dtype).view(bs, suffix_len, num_kv_heads, head_dim)
    vs = v_buffer.index_select(0, flat).to(q.dtype).view(bs, suffix_len, num_kv_heads, head_dim)
    s_s = torch.einsum("bhgd,blhd->bhgl", q4, ks)
    valid = torch.arange(suffix_len, device=q.device)[None, :] < (seq_lens - shared_len)[:, None]
    s_s.masked_fill_(~valid[:, None, None, :], float("-inf"))
    m_s = s_s.amax(dim=-1, keepdim=True)
    e_s = torch.exp(s_s - m_s)
    l_s, o_s = e_s.sum(dim=-1, keepdim=True), torch.einsum("bhgl,blhd->bhgd", e_s, vs)

    m = torch.maximum(m_p, m_s)
    a_p, a_s = torch.exp(m_p - m), torch.exp(m_s - m)
    out = (o_p * a_p + o_s * a_s) / (l_p * a_p + l_s * a_s)
    return out.reshape(bs, num_q_heads, head_dim)


def extend_attention_shared_prefix_torch(
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    extend_prefix_lens: list[int],
    extend_seq_lens: list[int],
    sm_scale: float,
    shared_len: int,
) -> torch.Tensor:
    """Extend attention when every request's first ``shared_len`` slots are the same and already
    cached (``extend_prefix_lens[i] >= shared_len``): the shared keys are read once for all new
    tokens, each request's private keys (cached tail + new tokens, causal) in one padded batch, and
    the two parts merged by log-sum-exp. Same result as :func:`extend_attention_torch`."""
    num_tokens, num_q_heads, head_dim = q.shape
    num_kv_heads = k_buffer.shape[1]
    group = num_q_heads // num_kv_heads
    bs = len(extend_seq_lens)
    device = q.device

    # Shared part: [Hkv, T*G, P], no mask (every new token comes after the shared prefix).
    qg = q.view(num_tokens, num_kv_heads, group, head_dim).permute(1, 0, 2, 3).reshape(
        num_kv_heads, num_tokens * group, head_dim)
    prefix_slots = req_to_token[req_pool_indices[0], :shared_len]
    kp = k_buffer[prefix_slots].to(q.dtype).permute(1, 2, 0).contiguous()
    vp = v_buffer[prefix_slots].to(q.dtype).transpose(0, 1)
    m_p, l_p, o_p = _partial_attention((qg @ kp) * sm_scale, vp)

    def token_major(t: torch.Tensor) -> torch.Tensor:  # [Hkv, T*G, x] -> [T, Hkv, G, x]
        return t.view(num_kv_heads, num_tokens, group, -1).permute(1, 0, 2, 3)

    m_p, l_p, o_p = token_major(m_p), token_major(l_p), token_major(o_p)

    # Private part, padded per request: queries [bs, Hkv, E*G, D] against keys [bs, Hkv, D, Ls].
    ext = torch.tensor(extend_seq_lens, device=device)
    prefix = torch.tensor(extend_prefix_lens, device=device)
    max_ext = int(ext.max())
    key_lens = prefix + ext - shared_len
    max_keys = int(key_lens.max())
    starts = torch.cumsum(ext, 0) - ext
    t_idx = torch.arange(max_ext, device=device)
    valid_q = t_idx[None, :] < ext[:, None]  # [bs, E]
    token_of = (starts[:, None] + t_idx[None, :]).clamp(max=num_tokens - 1)  # [bs, E]
    q_pad = q[token_of].view(bs, max_ext, num_kv_heads, group, head_dim).permute(0, 2, 1, 3, 4).reshape(
        bs, num_kv_heads, max_ext * group, head_dim)
    slots = req_to_token[req_pool_indices, shared_len : shared_len + max_keys]
    ks = k_buffer[slots].to(q.dtype).permute(0, 2, 3, 1).contiguous()  # [bs, Hkv, D, Ls]
    vs = v_buffer[slots].to(q.dtype).transpose(1, 2)  # [bs, Hkv, Ls, D]
    key_pos = shared_len + torch.arange(max_keys, device=device)  # absolute positions
    query_pos = prefix[:, None] + t_idx[None, :]  # [bs, E]
    allowed = ((key_pos[None, None, :] <= query_pos[:, :, None])
               & (key_pos[None, None, :] < (prefix + ext)[:, None, None]))
    # NOTE: padded query rows would see no key at all (NaN); let them see key 0, then drop them.
    allowed = allowed | ~valid_q[:, :, None]
    mask = allowed[:, None, :, None, :].expand(bs, 1, max_ext, group, max_keys).reshape(
        bs, 1, max_ext * group, max_keys)
    scores = ((q_pad @ ks) * sm_scale).masked_fill(~mask, float("-inf"))
    m_s, l_s, o_s = _partial_attention(scores, vs)  # [bs, Hkv, E*G, x]

    def gather_tokens(t: torch.Tensor) -> torch.Tensor:  # [bs, Hkv, E*G, x] -> [T, Hkv, G, x]
        t = t.view(bs, num_kv_heads, max_ext, group, -1).permute(0, 2, 1, 3, 4)  # [bs, E, Hkv, G, x]
        return t[valid_q]

    m_s, l_s, o_s = gather_tokens(m_s), gather_tokens(l_s), gather_tokens(o_s)
    m = torch.maximum(m_p, m_s)
    a_p, a_s = torch.exp(m_p - m), torch.exp(m_s - m)
    out = (o_p * a_p + o_s * a_s) / (l_p * a_p + l_s * a_s)
    return out.reshape(num_tokens, num_q_heads, head_dim)
