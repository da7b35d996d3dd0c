"""Sliding-window masks and logit soft-capping for the dense (torch) attention paths.

Conventions, as transformers' ``masking_utils.sliding_window_overlay``: a query at position ``p``
in a layer with window ``w`` sees the keys at positions ``k`` with ``p - w < k <= p`` (itself and the
``w - 1`` keys before it). A soft-capped layer (Gemma 2) replaces each scaled score ``s`` by
``cap * tanh(s / cap)`` before the mask and the softmax. Bidirectional spans (Gemma 3's images, as
transformers' ``blockwise_overlay``) let a query see every key of its own span, the window still
applying: ``(k <= p or same span) and p - w < k``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from radixlm.kernels.blocked_attention import attend_blocked, blocked_attention_applies


def check_window_softcap(window: int | None, softcap: float | None) -> None:
    """ValueError naming the bad one: a window is a positive key count, a cap a positive float."""
    if window is not None and window < 1:
        raise ValueError(f"sliding window must be a positive number of keys, got {window}")
    if softcap is not None and not softcap > 0:
        raise ValueError(f"attention logit softcap must be positive, got {softcap}")


def window_start(seq_len: int, window: int | None) -> int:
    """The first key position a query at ``seq_len - 1`` sees."""
    return 0 if window is None else max(0, seq_len - window)


def visible(
    q_pos: torch.Tensor, k_pos: torch.Tensor, window: int | None, spans: list[tuple[int, int]] | None = None
) -> torch.Tensor:
    """Bool ``[..., Q, K]``: key ``k_pos`` visible from query ``q_pos`` (causal, or both ways within
    one of ``spans``: ``[start, end)`` positions; within the window)."""
    ok = k_pos.unsqueeze(-2) <= q_pos.unsqueeze(-1)
    if spans:
        q_span, k_span = span_ids(q_pos, spans), span_ids(k_pos, spans)
        ok |= (k_span.unsqueeze(-2) == q_span.unsqueeze(-1)) & (q_span.unsqueeze(-1) >= 0)
    if window is not None:
        ok &= k_pos.unsqueeze(-2) > q_pos.unsqueeze(-1) - window
    return ok


def span_ids(pos: torch.Tensor, spans: list[tuple[int, int]]) -> torch.Tensor:
    """The index of the span each position lies in, -1 outside every span."""
    ids = torch.full_like(pos, -1)
    for i, (start, end) in enumerate(spans):
        ids = torch.where((pos >= start) & (pos < end), i, ids)
    return ids


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    sm_scale: float,
    softcap: float | None = None,
) -> torch.Tensor:
    """``scaled_dot_product_attention`` with grouped heads and, when ``softcap`` is set, capped scores.

    ``q`` ``[..., Hq, Q, D]``, ``k``/``v`` ``[..., Hkv, K, D]``, ``mask`` bool broadcastable to
    ``[..., Hq, Q, K]`` (True = visible; every query row must see at least one key). Many queries
    on the CPU go block by block through matrix products (``blocked_attention``).
    """
    if blocked_attention_applies(q, mask):
        return attend_blocked(q, k, v, mask, sm_scale, softcap)
    group = q.shape[-3] // k.shape[-3]
    if softcap is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=sm_scale, enable_gqa=group != 1)
    if group != 1:
        k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    scores = torch.matmul(q, k.transpose(-1, -2)) * sm_scale
    scores = torch.tanh(scores / softcap) * softcap
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype), v)
