"""Decode attention kernels: split the sequence, attend per split, then merge the splits."""

import triton
import triton.language as tl


@triton.jit
def soft_cap(s, cap):
    """``cap * tanh(s / cap)``, tanh written with ``exp`` (the interpreter has no libdevice)."""
    return cap * (1.0 - 2.0 / (tl.exp(2.0 * s / cap) + 1.0))


@triton.jit
def decode_split_kernel(
    Q,
    K,
    V,
    ReqToToken,
    ReqPoolIdx,
    SeqLens,
    MidO,
    MidLse,
    sm_scale,
    window,
    softcap,
    stride_qb,
    stride_qh,
    stride_ks,
    stride_kh,
    stride_vs,
    stride_vh,
    stride_row,
    stride_mob,
    stride_moh,
    stride_mos,
    stride_lb,
    stride_lh,
    GROUP: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PRECISION: tl.constexpr,
    USE_SOFTCAP: tl.constexpr,
):
    """Program ``(b, kv_head, split)``: the ``GROUP`` query heads of one KV head over one split.

    The splits share the request's visible keys: all of them, or the last ``window`` (> 0). Writes
    the split's normalised partial output and its log-sum-exp (-inf for an empty split).
    """
    b = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(SeqLens + b)
    row = tl.load(ReqPoolIdx + b)
    first = tl.where(window > 0, tl.maximum(seq_len - window, 0), 0)
    split_len = tl.cdiv(seq_len - first, NUM_SPLITS)
    start = first + split * split_len
    end = tl.minimum(start + split_len, seq_len)

    offs_h = tl.arange(0, BLOCK_H)
    heads = kv_head * GROUP + offs_h
    mask_h = offs_h < GROUP
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < HEAD_DIM
    q = tl.load(
        Q + b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :],
        mask=mask_h[:, None] & mask_d[None, :],
        other=0.0,
    )

    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_D], tl.float32)
    for n0 in range(start, end, BLOCK_N):
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
        s = tl.where(mask_n[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        v = tl.load(
            V + slots[:, None] * stride_vs + kv_head * stride_vh + offs_d[None, :], mask=kv_mask, other=0.0
        )
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        l_i = l_i * alpha + tl.sum(p, 1)
        m_i = m_new

    has_keys = l_i > 0
    out = acc / tl.where(has_keys, l_i, 1.0)[:, None]
    lse = tl.where(has_keys, m_i + tl.log(tl.where(has_keys, l_i, 1.0)), float("-inf"))
    mo = MidO + b * stride_mob + heads[:, None] * stride_moh + split * stride_mos + offs_d[None, :]
    tl.store(mo, out, mask=mask_h[:, None] & mask_d[None, :])
    tl.store(MidLse + b * stride_lb + heads * stride_lh + split, lse, mask=mask_h)


@triton.jit
def decode_merge_kernel(
    MidO,
    MidLse,
    Out,
    stride_mob,
    stride_moh,
    stride_mos,
    stride_lb,
    stride_lh,
    stride_ob,
    stride_oh,
    NUM_SPLITS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """Program ``(b, head)``: merge the splits' partial outputs, weighted by their log-sum-exp."""
    b = tl.program_id(0)
    head = tl.program_id(1)
    offs_s = tl.arange(0, BLOCK_S)
    mask_s = offs_s < NUM_SPLITS
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < HEAD_DIM
    lse = tl.load(MidLse + b * stride_lb + head * stride_lh + offs_s, mask=mask_s, other=float("-inf"))
    m = tl.max(lse, 0)
    m = tl.where(m == float("-inf"), 0.0, m)
    w = tl.exp(lse - m)
    o = tl.load(
        MidO + b * stride_mob + head * stride_moh + offs_s[:, None] * stride_mos + offs_d[None, :],
        mask=mask_s[:, None] & mask_d[None, :],
        other=0.0,
    )
    out = tl.sum(w[:, None] * o, 0) / tl.maximum(tl.sum(w, 0), 1e-30)
    tl.store(Out + b * stride_ob + head * stride_oh + offs_d, out, mask=mask_d)
