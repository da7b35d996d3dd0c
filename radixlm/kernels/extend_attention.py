"""Extend (prefill) attention: new tokens on top of a cached prefix, causal within the new tokens."""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from radixlm.kernels._launch import dot_precision, next_power_of_2


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


class ExtendMetadata(NamedTuple):
    """Flat per-request metadata the Triton kernel reads on the device."""

    prefix_lens: torch.Tensor  # [bs]
    extend_lens: torch.Tensor  # [bs]
    start_loc: torch.Tensor  # [bs] offset of each request's first new token in ``q``
    max_extend_len: int  # host int: sizes the grid


def build_extend_metadata(
    extend_prefix_lens: torch.Tensor, extend_seq_lens: torch.Tensor, max_extend_len: int
) -> ExtendMetadata:
    """Start offsets from the per-request lengths (device tensors); one small cumsum per step."""
    start_loc = torch.cumsum(extend_seq_lens, 0) - extend_seq_lens
    return ExtendMetadata(extend_prefix_lens, extend_seq_lens, start_loc, int(max_extend_len))


def extend_attention_triton(
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    meta: ExtendMetadata,
    sm_scale: float,
) -> torch.Tensor:
    """Triton version of :func:`extend_attention_torch`; the lengths come as :class:`ExtendMetadata`.

    One program per ``(request, query head, block of new tokens)`` with an online softmax over the
    request's keys; GQA maps query head ``h`` to KV head ``h // (Hq // Hkv)``.
    """
    q = q.contiguous()
    num_tokens, num_q_heads, head_dim = q.shape
    num_kv_heads = k_buffer.shape[1]
    out = torch.empty_like(q)
    bs = int(req_pool_indices.shape[0])
    if num_tokens == 0 or bs == 0:
        return out
    from radixlm.kernels._triton import extend_attention as kernels

    block_m = 64 if q.is_cuda else 16
    block_n = 64 if q.is_cuda else 16
    grid = (bs, num_q_heads, -(-meta.max_extend_len // block_m))
    kernels.extend_kernel[grid](
        q,
        k_buffer,
        v_buffer,
        out,
        req_to_token,
        req_pool_indices,
        meta.prefix_lens,
        meta.extend_lens,
        meta.start_loc,
        sm_scale,
        q.stride(0),
        q.stride(1),
        k_buffer.stride(0),
        k_buffer.stride(1),
        v_buffer.stride(0),
        v_buffer.stride(1),
        out.stride(0),
        out.stride(1),
        req_to_token.stride(0),
        GROUP=num_q_heads // num_kv_heads,
        HEAD_DIM=head_dim,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_D=next_power_of_2(head_dim),
        PRECISION=dot_precision(k_buffer.dtype),
    )
    return out
