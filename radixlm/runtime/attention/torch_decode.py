"""Decode attention on the CPU with the KV gather planned once per step instead of once per layer.

Every layer of a decode step reads the same slots (``req_to_token[rows, :seq_len]``), so the slot
list and the padding mask are built once in ``plan_decode``; each layer then gathers its K and V
with one ``index_select`` each (a flat copy, ~5x cheaper than advanced indexing for these small
tensors) and calls ``scaled_dot_product_attention`` once for the batch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F


@dataclass
class DecodePlan:
    """The step's flat slot list ``[bs * max_len]`` and mask ``[bs, 1, 1, max_len]`` (None when every
    request has ``max_len`` keys)."""

    slots: torch.Tensor
    mask: Optional[torch.Tensor]
    batch_size: int
    max_len: int


def plan_decode(req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
                seq_lens_cpu: list[int]) -> DecodePlan:
    """Slots of each request's first ``max(seq_lens)`` positions, row after row."""
    max_len = max(seq_lens_cpu, default=0)
    slots = req_to_token[:, :max_len].index_select(0, req_pool_indices).reshape(-1)
    mask = None
    if min(seq_lens_cpu, default=0) != max_len:
        valid = torch.arange(max_len, device=seq_lens.device)[None, :] < seq_lens[:, None]
        mask = valid[:, None, None, :]  # padding reads stale (in-range) slots, masked out here
    return DecodePlan(slots, mask, len(seq_lens_cpu), max_len)


def decode_attention_planned(q: torch.Tensor, k_buffer: torch.Tensor, v_buffer: torch.Tensor,
                             plan: DecodePlan, sm_scale: float) -> torch.Tensor:
    """``q`` ``[bs, Hq, D]`` over the planned slots; returns ``[bs, Hq, D]`` (equal to
    ``radixlm.kernels.decode_attention.decode_attention_torch``)."""
    bs, num_q_heads, head_dim = q.shape
    num_kv_heads = k_buffer.shape[1]
    shape = (bs, plan.max_len, num_kv_heads, head_dim)
    k = k_buffer.index_select(0, plan.slots).view(shape).transpose(1, 2).to(q.dtype)
    v = v_buffer.index_select(0, plan.slots).view(shape).transpose(1, 2).to(q.dtype)
    out = F.scaled_dot_product_attention(q.unsqueeze(2), k, v, attn_mask=plan.mask, scale=sm_scale,
                                         enable_gqa=num_q_heads != num_kv_heads)
    return out.squeeze(2)
