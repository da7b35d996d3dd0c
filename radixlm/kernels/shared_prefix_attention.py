"""Attention for a batch whose requests share a cached prefix (cascade attention), decode and extend.

The radix cache gives requests that share a prompt prefix the *same* KV slots for it. Plain decode
attention still gathers and reads those keys once per request; here the shared part is read once
for the whole batch (one matrix product against all queries), the private suffixes are attended
per request, and the two partial softmaxes are merged by their log-sum-exp. Mathematically the
same attention as :func:`decode_attention_torch`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from radixlm.kernels.cpu.decode_ops import DecodeKernels


def common_slot_prefix_len(req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, limit: int) -> int:
    """Length of the slot prefix shared by every request's row (at most ``limit``)."""
    if limit <= 0 or req_pool_indices.numel() < 2:
        return 0
    rows = req_to_token[req_pool_indices, :limit]
    same = (rows == rows[:1]).all(dim=0)
    if bool(same.all()):
        return limit
    return int(torch.argmin(same.to(torch.int8)))


def _flash_cpu_available() -> bool:
    return hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu")


def attention_with_lse(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sm_scale: float, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of ``q`` ``[B, H, N, D]`` over ``k``/``v`` ``[B, H, P, D]``, where ``mask`` (bool,
    broadcastable to ``[B, H, N, P]``; None: every key) says which keys each query sees (at least
    one each): the normalised output ``[B, H, N, D]`` and the log-sum-exp of each row's scaled
    scores ``[B, H, N]``.

    On the CPU this is torch's fused flash-attention kernel (blocked products and a vectorised exp,
    2.0-2.5x faster here than the product, exp and product below it in separate passes)."""
    if q.device.type == "cpu" and q.dtype == torch.float32 and _flash_cpu_available():
        bias = None  # the kernel takes the mask as scores to add, in q's dtype
        if mask is not None:
            bias = torch.zeros(mask.shape, dtype=q.dtype).masked_fill_(~mask, float("-inf"))
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, False, attn_mask=bias, scale=sm_scale
        )
    scores = (q @ k.transpose(-1, -2)) * sm_scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    m = scores.amax(dim=-1, keepdim=True)
    e = torch.exp(scores - m)
    total = e.sum(dim=-1, keepdim=True)
    return (e @ v) / total, (m + torch.log(total)).squeeze(-1)


def merge_attention(
    out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
) -> torch.Tensor:
    """Attention over the union of two key sets from each set's normalised output ``[..., D]`` and
    log-sum-exp ``[...]``: the weight of set b is e^lse_b / (e^lse_a + e^lse_b) = sigmoid(lse_b - lse_a),
    so the merge is one interpolation over the outputs."""
    return torch.lerp(out_a, out_b, torch.sigmoid(lse_b - lse_a).unsqueeze(-1))


def _shared_part(
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    prefix_slots: torch.Tensor,
    sm_scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every query ``q`` ``[N, Hq, D]`` over the shared prefix's keys, read once for all of them,
    grouped by kv head: ``(out [Hkv, N * group, D], lse [Hkv, N * group])``."""
    n, num_q_heads, head_dim = q.shape
    num_kv_heads = k_buffer.shape[1]
    group = num_q_heads // num_kv_heads
    qg = q.view(n, num_kv_heads, group, head_dim).transpose(0, 1).reshape(num_kv_heads, n * group, head_dim)
    kp = k_buffer.index_select(0, prefix_slots).to(q.dtype).transpose(0, 1)  # [Hkv, P, D]
    vp = v_buffer.index_select(0, prefix_slots).to(q.dtype).transpose(0, 1)
    out, lse = attention_with_lse(qg.unsqueeze(0), kp.unsqueeze(0), vp.unsqueeze(0), sm_scale)
    return out[0], lse[0]


def _token_major(out: torch.Tensor, lse: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``_shared_part``'s ``[Hkv, N * group, x]`` layout -> ``[N, Hq, D]`` and ``[N, Hq]``."""
    num_kv_heads, _, head_dim = out.shape
    out = out.view(num_kv_heads, n, -1, head_dim).transpose(0, 1).reshape(n, -1, head_dim)
    return out, lse.view(num_kv_heads, n, -1).transpose(0, 1).reshape(n, -1)


@dataclass(frozen=True)
class TokenQueries:
    """An extend's new tokens seen as one-token decodes: token i of request r attends the slots
    ``req_to_token[rows[i], :seq_lens[i]]``, its request's keys up to and including itself."""

    rows: torch.Tensor  # int64 [T]
    seq_lens: torch.Tensor  # int64 [T]
    seq_lens_cpu: list[int]

    @classmethod
    def of(
        cls, req_pool_indices: torch.Tensor, extend_prefix_lens: list[int], extend_seq_lens: list[int]
    ) -> TokenQueries:
        lens = [prefix + i + 1 for prefix, n in zip(extend_prefix_lens, extend_seq_lens) for i in range(n)]
        counts = torch.tensor(extend_seq_lens, device=req_pool_indices.device)
        rows = torch.repeat_interleave(req_pool_indices, counts).contiguous()
        return cls(rows, torch.tensor(lens, dtype=torch.int64, device=req_pool_indices.device), lens)


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
    suffix_kernels: DecodeKernels | None = None,
    seq_lens_cpu: list[int] | None = None,
) -> torch.Tensor:
    """``q``: ``[bs, Hq, D]``; the first ``shared_len`` slots of every row are identical and every
    request has at least one key past them. Returns ``[bs, Hq, D]``.

    With ``suffix_kernels`` (fp32 CPU pools; ``seq_lens_cpu`` given) the private suffixes are read in
    place by the C++ decode kernel, which also merges them with the shared part; otherwise they are
    gathered and padded to the longest."""
    bs, num_q_heads, head_dim = q.shape
    num_kv_heads = k_buffer.shape[1]
    prefix_slots = req_to_token[req_pool_indices[0], :shared_len]
    out_p, lse_p = _shared_part(q, k_buffer, v_buffer, prefix_slots, sm_scale)
    if suffix_kernels is not None:
        assert seq_lens_cpu is not None
        return suffix_kernels.paged_decode_attention_after_prefix(
            q.contiguous(),
            k_buffer,
            v_buffer,
            req_to_token,
            req_pool_indices,
            seq_lens,
            seq_lens_cpu,
            sm_scale,
            shared_len,
            out_p.contiguous(),
            lse_p.contiguous(),
        )
    out_p, lse_p = _token_major(out_p, lse_p, bs)

    # Private suffixes, padded to the longest: [bs, Ls, Hkv, D].
    # NOTE: index_select + einsum on the gathered [keys, Hkv, D] layout: ~2x faster on CPU than
    # advanced indexing followed by permute().contiguous() into matmul layouts.
    q4 = (q * sm_scale).view(bs, num_kv_heads, num_q_heads // num_kv_heads, head_dim)
    suffix_len = max_seq_len - shared_len
    flat = req_to_token[req_pool_indices, shared_len:max_seq_len].reshape(-1)
    ks = k_buffer.index_select(0, flat).to(q.dtype).view(bs, suffix_len, num_kv_heads, head_dim)
    vs = v_buffer.index_select(0, flat).to(q.dtype).view(bs, suffix_len, num_kv_heads, head_dim)
    s_s = torch.einsum("bhgd,blhd->bhgl", q4, ks)
    valid = torch.arange(suffix_len, device=q.device)[None, :] < (seq_lens - shared_len)[:, None]
    s_s.masked_fill_(~valid[:, None, None, :], float("-inf"))
    m_s = s_s.amax(dim=-1, keepdim=True)
    e_s = torch.exp(s_s - m_s)
    l_s = e_s.sum(dim=-1, keepdim=True)
    out_s = torch.einsum("bhgl,blhd->bhgd", e_s, vs) / l_s
    lse_s = (m_s + torch.log(l_s)).squeeze(-1)
    return merge_attention(
        out_p, lse_p, out_s.reshape(bs, num_q_heads, head_dim), lse_s.reshape(bs, num_q_heads)
    )


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
    suffix_kernels: DecodeKernels | None = None,
    token_queries: TokenQueries | None = None,
) -> torch.Tensor:
    """Extend attention when every request's first ``shared_len`` slots are the same and already
    cached (``extend_prefix_lens[i] >= shared_len``): the shared keys are read once for all new
    tokens, each request's private keys (cached tail + new tokens, causal) in one padded batch, and
    the two parts merged by log-sum-exp. Same result as :func:`extend_attention_torch`.

    With ``suffix_kernels`` (fp32 CPU pools) each new token's private keys are read in place by the
    C++ decode kernel as if the token were a decode of its own (``token_queries``, computed here when
    not given), which also merges them with the shared part."""
    num_tokens, num_q_heads, head_dim = q.shape
    num_kv_heads = k_buffer.shape[1]
    group = num_q_heads // num_kv_heads
    bs = len(extend_seq_lens)
    device = q.device

    # Shared part: every new token comes after the shared prefix, so no mask.
    prefix_slots = req_to_token[req_pool_indices[0], :shared_len]
    out_p, lse_p = _shared_part(q, k_buffer, v_buffer, prefix_slots, sm_scale)
    if suffix_kernels is not None:
        tq = token_queries or TokenQueries.of(req_pool_indices, extend_prefix_lens, extend_seq_lens)
        return suffix_kernels.paged_decode_attention_after_prefix(
            q.contiguous(),
            k_buffer,
            v_buffer,
            req_to_token,
            tq.rows,
            tq.seq_lens,
            tq.seq_lens_cpu,
            sm_scale,
            shared_len,
            out_p.contiguous(),
            lse_p.contiguous(),
        )
    out_p, lse_p = _token_major(out_p, lse_p, num_tokens)

    # Private part, padded per request: queries [bs, Hkv, E*G, D] against keys [bs, Hkv, Ls, D].
    ext = torch.tensor(extend_seq_lens, device=device)
    prefix = torch.tensor(extend_prefix_lens, device=device)
    max_ext = int(ext.max())
    key_lens = prefix + ext - shared_len
    max_keys = int(key_lens.max())
    starts = torch.cumsum(ext, 0) - ext
    t_idx = torch.arange(max_ext, device=device)
    valid_q = t_idx[None, :] < ext[:, None]  # [bs, E]
    token_of = (starts[:, None] + t_idx[None, :]).clamp(max=num_tokens - 1)  # [bs, E]
    q_pad = (
        q[token_of]
        .view(bs, max_ext, num_kv_heads, group, head_dim)
        .permute(0, 2, 1, 3, 4)
        .reshape(bs, num_kv_heads, max_ext * group, head_dim)
    )
    slots = req_to_token[req_pool_indices, shared_len : shared_len + max_keys]
    ks = k_buffer[slots].to(q.dtype).transpose(1, 2)  # [bs, Hkv, Ls, D]
    vs = v_buffer[slots].to(q.dtype).transpose(1, 2)
    key_pos = shared_len + torch.arange(max_keys, device=device)  # absolute positions
    query_pos = prefix[:, None] + t_idx[None, :]  # [bs, E]
    allowed = (key_pos[None, None, :] <= query_pos[:, :, None]) & (
        key_pos[None, None, :] < (prefix + ext)[:, None, None]
    )
    # NOTE: padded query rows would see no key at all (NaN); let them see key 0, then drop them.
    allowed = allowed | ~valid_q[:, :, None]
    mask = (
        allowed[:, None, :, None, :]
        .expand(bs, 1, max_ext, group, max_keys)
        .reshape(bs, 1, max_ext * group, max_keys)
    )
    out_s, lse_s = attention_with_lse(q_pad, ks, vs, sm_scale, mask)  # [bs, Hkv, E*G, x]

    def gather_tokens(t: torch.Tensor) -> torch.Tensor:  # [bs, Hkv, E*G, x] -> [T, Hq, x]
        t = t.view(bs, num_kv_heads, max_ext, group, -1).permute(0, 2, 1, 3, 4)  # [bs, E, Hkv, G, x]
        return t[valid_q].reshape(num_tokens, num_q_heads, -1)

    out_s, lse_s = gather_tokens(out_s), gather_tokens(lse_s.unsqueeze(-1)).squeeze(-1)
    return merge_attention(out_p, lse_p, out_s, lse_s)
