"""Extend (prefill) attention: new tokens on top of a cached prefix, causal within the new tokens."""

from __future__ import annotations

from typing import NamedTuple

import torch

from radixlm.kernels._launch import dot_precision, next_power_of_2
from radixlm.kernels.windowed_attention import attend, check_window_softcap, visible, window_start


def extend_attention_torch(
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    extend_prefix_lens: list[int],
    extend_seq_lens: list[int],
    sm_scale: float,
    window: int | None = None,
    softcap: float | None = None,
    spans: list[list[tuple[int, int]]] | None = None,
) -> torch.Tensor:
    """Exact reference. ``q``: ``[T, Hq, D]`` new tokens of all requests concatenated.

    The new tokens' K/V must already be stored in the pool, so request ``i`` reads all of its
    ``prefix + extend`` keys through ``req_to_token``. New token ``j`` of request ``i`` (absolute
    position ``prefix + j``) attends to keys ``0 .. prefix + j`` (only the last ``window`` of them
    with a sliding window; scores soft-capped by ``softcap``: ``radixlm.kernels.windowed_attention``);
    ``spans[i]`` (None: all causal) are request ``i``'s ``[start, end)`` positions whose tokens also
    see each other's later keys (Gemma 3's images). Returns ``[T, Hq, D]``.
    """
    check_window_softcap(window, softcap)
    out = torch.empty_like(q)
    start = 0
    rows = req_pool_indices.tolist()
    for i, (row, prefix_len, ext_len) in enumerate(zip(rows, extend_prefix_lens, extend_seq_lens)):
        total = prefix_len + ext_len
        first = window_start(prefix_len + 1, window)  # the first key any of these queries sees
        slots = req_to_token[row, first:total]
        k = k_buffer[slots].to(q.dtype).transpose(0, 1)  # [Hkv, keys, D]
        v = v_buffer[slots].to(q.dtype).transpose(0, 1)
        qi = q[start : start + ext_len].transpose(0, 1)  # [Hq, ext, D]
        q_pos = torch.arange(prefix_len, total, device=q.device)
        k_pos = torch.arange(first, total, device=q.device)
        mask = visible(q_pos, k_pos, window, None if spans is None else spans[i])
        oi = attend(qi, k, v, mask, sm_scale, softcap)
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
    window: int | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """Triton version of :func:`extend_attention_torch`; the lengths come as :class:`ExtendMetadata`.

    One program per ``(request, query head, block of new tokens)`` with an online softmax over the
    request's keys; GQA maps query head ``h`` to KV head ``h // (Hq // Hkv)``.
    """
    check_window_softcap(window, softcap)
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
        window or 0,
        softcap or 0.0,
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
        USE_SOFTCAP=softcap is not None,
    )
    return out
