"""Decode attention: one query token per request against its KV slots in the paged pool."""

from __future__ import annotations

import torch

from radixlm.kernels._launch import dot_precision, next_power_of_2, num_sms
from radixlm.kernels.windowed_attention import attend, check_window_softcap

MAX_KV_SPLITS = 16
MIN_SPLIT_LEN = 64  # keys; shorter splits cost more to merge than they save


def decode_attention_torch(
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    sm_scale: float,
    max_seq_len: int | None = None,
    window: int | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """Exact reference. ``q``: ``[bs, Hq, D]``; buffers ``[S, Hkv, D]``; returns ``[bs, Hq, D]``.

    Request ``i`` attends to the slots ``req_to_token[req_pool_indices[i], :seq_lens[i]]`` (only the
    last ``window`` of them with a sliding window; scores soft-capped by ``softcap``).
    The KV of all requests is gathered into one padded ``[bs, L, Hkv, D]`` block and masked, so the
    whole batch is one attention call (a Python loop per request costs more than the math on CPU).
    """
    check_window_softcap(window, softcap)
    max_len = int(max_seq_len if max_seq_len is not None else int(seq_lens.max()))
    slots = req_to_token[req_pool_indices, :max_len]  # [bs, L]
    k = k_buffer[slots].to(q.dtype).transpose(1, 2)  # [bs, Hkv, L, D]
    v = v_buffer[slots].to(q.dtype).transpose(1, 2)
    key_pos = torch.arange(max_len, device=q.device)[None, :]
    valid = key_pos < seq_lens[:, None]  # [bs, L]
    if window is not None:
        valid &= key_pos >= seq_lens[:, None] - window
    out = attend(q.unsqueeze(2), k, v, valid[:, None, None, :], sm_scale, softcap)  # [bs, Hq, 1, D]
    return out.squeeze(2)


def default_num_kv_splits(
    batch_size: int, num_kv_heads: int, device: torch.device, max_seq_len: int | None = None
) -> int:
    """Splits that give about two programs per SM, fewer for short (known) maximum lengths.

    A host-only computation, so the choice is fixed for a captured CUDA graph of a given batch size.
    """
    want = -(-2 * num_sms(device) // max(1, batch_size * num_kv_heads))
    if max_seq_len is not None:
        want = min(want, -(-int(max_seq_len) // MIN_SPLIT_LEN))
    return max(1, min(MAX_KV_SPLITS, want))


def decode_attention_triton(
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    sm_scale: float,
    max_seq_len: int | None = None,
    num_kv_splits: int | None = None,
    window: int | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """Triton version of :func:`decode_attention_torch`, same arguments and result.

    Stage 1 runs one program per ``(request, KV head, split)``: the query heads sharing a KV head
    (GQA) attend together to ``1/num_kv_splits`` of the request's keys, read through
    ``req_to_token``. Stage 2 merges the splits by their log-sum-exp. Split bounds are computed
    in the kernel from ``seq_lens``, so nothing here reads device memory on the host: the call is
    CUDA-graph capturable. ``max_seq_len`` (an upper bound) only caps the default number of splits.
    """
    check_window_softcap(window, softcap)
    q = q.contiguous()
    bs, num_q_heads, head_dim = q.shape
    num_kv_heads = k_buffer.shape[1]
    group = num_q_heads // num_kv_heads
    if num_kv_splits is None:
        num_kv_splits = default_num_kv_splits(bs, num_kv_heads, q.device, max_seq_len)
    mid_o = torch.empty((bs, num_q_heads, num_kv_splits, head_dim), dtype=torch.float32, device=q.device)
    mid_lse = torch.empty((bs, num_q_heads, num_kv_splits), dtype=torch.float32, device=q.device)
    out = torch.empty_like(q)
    if bs == 0:
        return out
    from radixlm.kernels._triton import decode_attention as kernels

    block_d = next_power_of_2(head_dim)
    kernels.decode_split_kernel[(bs, num_kv_heads, num_kv_splits)](
        q,
        k_buffer,
        v_buffer,
        req_to_token,
        req_pool_indices,
        seq_lens,
        mid_o,
        mid_lse,
        sm_scale,
        window or 0,
        softcap or 0.0,
        q.stride(0),
        q.stride(1),
        k_buffer.stride(0),
        k_buffer.stride(1),
        v_buffer.stride(0),
        v_buffer.stride(1),
        req_to_token.stride(0),
        mid_o.stride(0),
        mid_o.stride(1),
        mid_o.stride(2),
        mid_lse.stride(0),
        mid_lse.stride(1),
        GROUP=group,
        NUM_SPLITS=num_kv_splits,
        HEAD_DIM=head_dim,
        BLOCK_H=max(16, next_power_of_2(group)),
        BLOCK_D=block_d,
        BLOCK_N=32 if q.is_cuda else 16,
        PRECISION=dot_precision(k_buffer.dtype),
        USE_SOFTCAP=softcap is not None,
    )
    kernels.decode_merge_kernel[(bs, num_q_heads)](
        mid_o,
        mid_lse,
        out,
        mid_o.stride(0),
        mid_o.stride(1),
        mid_o.stride(2),
        mid_lse.stride(0),
        mid_lse.stride(1),
        out.stride(0),
        out.stride(1),
        NUM_SPLITS=num_kv_splits,
        HEAD_DIM=head_dim,
        BLOCK_S=next_power_of_2(num_kv_splits),
        BLOCK_D=block_d,
    )
    return out
