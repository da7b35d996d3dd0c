"""Extend attention kernel: a block of new query tokens against prefix + new keys (causal)."""

import triton
import triton.language as tl

from radixlm.kernels._triton.decode_attention import soft_cap


@triton.jit
def extend_kernel(
    Q,
    K,
    V,
    Out,
    ReqToToken,
    ReqPoolIdx,
    PrefixLens,
    ExtendLens,
    ExtendStartLoc,
    sm_scale,
    window,
    softcap,
    stride_qt,
    stride_qh,
    stride_ks,
    stride_kh,
    stride_vs,
    stride_vh,
    stride_ot,
    stride_oh,
    stride_row,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr,
    USE_SOFTCAP: tl.constexpr,
):
    """Program ``(b, head, m_block)``: ``BLOCK_M`` new tokens of request ``b`` for one query head.

    All keys (the cached prefix and the new tokens, already stored) are read through
    ``req_to_token``; new token ``j`` sees keys ``0 .. prefix + j``, only the last ``window`` of them
    when ``window > 0``.
    """
    b = tl.program_id(0)
    head = tl.program_id(1)
    m_block = tl.program_id(2)
    ext_len = tl.load(ExtendLens + b)
    if m_block * BLOCK_M >= ext_len:
        return
    prefix_len = tl.load(PrefixLens + b)
    q_start = tl.load(ExtendStartLoc + b)
    row = tl.load(ReqPoolIdx + b)
    kv_head = head // GROUP

    offs_m = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = offs_m < ext_len
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < HEAD_DIM
    q = tl.load(
        Q + (q_start + offs_m)[:, None] * stride_qt + head * stride_qh + offs_d[None, :],
        mask=mask_m[:, None] & mask_d[None, :],
        other=0.0,
    )
    q_pos = prefix_len + offs_m

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    end = prefix_len + tl.minimum(ext_len, (m_block + 1) * BLOCK_M)
    first = tl.where(window > 0, tl.maximum(prefix_len + m_block * BLOCK_M - window + 1, 0), 0)
    for n0 in range(first, end, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        mask_n = offs_n < end
        slots = tl.load(ReqToToken + row * stride_row + offs_n, mask=mask_n, other=0)
        kv_mask = mask_n[:, None] & mask_d[None, :]
        k = tl.load(
            K + slots[:, None] * stride_ks + kv_head * stride_kh + offs_d[None, :], mask=kv_mask, other=0.0
        )
        s = tl.dot(q.to(k.dtype), tl.trans(k), input_precision=PRECISION) * sm_scale
        if USE_SOFTCAP:
            s = soft_cap(s, softcap)
        visible = mask_n[None, :] & (offs_n[None, :] <= q_pos[:, None])
        visible &= (window <= 0) | (offs_n[None, :] > q_pos[:, None] - window)
        s = tl.where(visible, s, float("-inf"))
        # a row that has seen no key yet (a window starting past this block) keeps m = -inf: shift by 0
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp(s - m_shift[:, None])
        alpha = tl.exp(m_i - m_shift)
        v = tl.load(
            V + slots[:, None] * stride_vs + kv_head * stride_vh + offs_d[None, :], mask=kv_mask, other=0.0
        )
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        l_i = l_i * alpha + tl.sum(p, 1)
        m_i = m_new

    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(
        Out + (q_start + offs_m)[:, None] * stride_ot + head * stride_oh + offs_d[None, :],
        out,
        mask=mask_m[:, None] & mask_d[None, :],
    )
