"""Decode attention on the CPU, planned once per step instead of once per layer.

Every layer of a decode step reads the same slots (``req_to_token[rows, :seq_len]``). With fp32 (or
fp16/bf16) K/V on a CPU that can build it, each layer runs
``radixlm/kernels/cpu/decode_attention.cpp``, which reads K and V in place from the pool (~6x
cheaper than gathering them at batch 1), a speculative verify step's rows of one request (``row_groups``)
reading their keys once for all of them. Elsewhere the slot list and the padding mask are built
once in ``plan_decode``; each layer then gathers its K and V with one ``index_select`` each (a flat
copy, ~5x cheaper than advanced indexing for these small tensors) and calls
``scaled_dot_product_attention`` once for the batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from radixlm.kernels.cpu.build import decode_kernels_if_ready
from radixlm.kernels.cpu.decode_ops import POOL_DTYPES
from radixlm.kernels.cpu.row_groups import RowGroups
from radixlm.kernels.windowed_attention import attend


@dataclass
class DecodePlan:
    """One decode step's requests: their ``req_to_token`` rows and lengths, whether the in-place
    kernel serves them (and which runs of its rows it reads in one pass, ``row_groups``), and (built
    on first use by the gather path) the flat slot list ``[bs * max_len]`` and mask
    ``[bs, 1, 1, max_len]`` (None when every request has ``max_len`` keys)."""

    req_to_token: torch.Tensor
    req_pool_indices: torch.Tensor
    seq_lens: torch.Tensor
    seq_lens_cpu: list[int]
    in_place: bool  # each layer reads K/V in place through the C++ kernel (fp32 q)
    row_groups: RowGroups | None = None
    checked: bool = False  # the kernel has checked the step's tensors (a later layer checks q and K/V)
    _gather: tuple[torch.Tensor, torch.Tensor | None] | None = field(default=None, repr=False)

    @property
    def batch_size(self) -> int:
        return len(self.seq_lens_cpu)

    @property
    def max_len(self) -> int:
        return max(self.seq_lens_cpu, default=0)

    def gather_slots(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(slots, mask)`` of each request's first ``max_len`` positions, row after row."""
        if self._gather is None:
            max_len = self.max_len
            slots = self.req_to_token[:, :max_len].index_select(0, self.req_pool_indices).reshape(-1)
            mask = None
            if min(self.seq_lens_cpu, default=0) != max_len:
                valid = torch.arange(max_len, device=self.seq_lens.device)[None, :] < self.seq_lens[:, None]
                mask = valid[:, None, None, :]  # padding reads stale (in-range) slots, masked out here
            self._gather = (slots, mask)
        return self._gather


def plan_decode(
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    seq_lens_cpu: list[int],
    in_place: bool = False,
    row_groups: list[int] | None = None,
) -> DecodePlan:
    """The step's plan; ``in_place`` (``in_place_decode_available`` for the step's pool) lets the
    layers take the kernel, reading each of the ``row_groups`` runs of rows of one request
    (``ForwardBatch.row_groups``) in one pass; the gather path's slot list is built only if a layer
    needs it."""
    int64 = all(t.dtype == torch.int64 for t in (req_to_token, req_pool_indices, seq_lens))
    in_place = in_place and int64
    groups = RowGroups.of(row_groups, req_pool_indices.tolist()) if in_place and row_groups else None
    return DecodePlan(req_to_token, req_pool_indices, seq_lens, seq_lens_cpu, in_place, groups)


def decode_attention_planned(
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    plan: DecodePlan,
    sm_scale: float,
    window: int | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """``q`` ``[bs, Hq, D]`` over the planned requests' keys (the last ``window`` of them, scores
    soft-capped by ``softcap``); returns ``[bs, Hq, D]`` (equal, within rounding, to
    ``radixlm.kernels.decode_attention.decode_attention_torch``)."""
    kernels = decode_kernels_if_ready() if plan.in_place and q.dtype == torch.float32 else None
    if kernels is not None:
        out = kernels.paged_decode_attention(
            q.contiguous(),
            k_buffer,
            v_buffer,
            plan.req_to_token,
            plan.req_pool_indices,
            plan.seq_lens,
            plan.seq_lens_cpu,
            sm_scale,
            window=window,
            softcap=softcap,
            row_groups=plan.row_groups,
            step_checked=plan.checked,
        )
        plan.checked = True
        return out
    return _gather_attention(q, k_buffer, v_buffer, plan, sm_scale, window, softcap)


def in_place_decode_available(k_buffer: torch.Tensor) -> bool:
    """Whether decodes over this pool run the in-place kernel (fp32, fp16 or bf16 CPU K/V, and a
    compiler)."""
    return (
        k_buffer.device.type == "cpu"
        and k_buffer.dtype in POOL_DTYPES
        and k_buffer.is_contiguous()
        and decode_kernels_if_ready() is not None
    )


def _gather_attention(
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    plan: DecodePlan,
    sm_scale: float,
    window: int | None,
    softcap: float | None,
) -> torch.Tensor:
    bs, _, head_dim = q.shape
    num_kv_heads = k_buffer.shape[1]
    slots, mask = plan.gather_slots()
    if window is not None and window < plan.max_len:
        key_pos = torch.arange(plan.max_len, device=plan.seq_lens.device)
        in_window = (key_pos[None, :] >= plan.seq_lens[:, None] - window)[:, None, None, :]
        mask = in_window if mask is None else mask & in_window
    shape = (bs, plan.max_len, num_kv_heads, head_dim)
    k = k_buffer.index_select(0, slots).view(shape).transpose(1, 2).to(q.dtype)
    v = v_buffer.index_select(0, slots).view(shape).transpose(1, 2).to(q.dtype)
    return attend(q.unsqueeze(2), k, v, mask, sm_scale, softcap).squeeze(2)
