"""The torch attention backend: exact attention on any device, with cascade reads of a shared prefix."""

from __future__ import annotations

import torch

from radixlm.kernels.cpu.build import decode_kernels_if_ready
from radixlm.kernels.cpu.decode_ops import DecodeKernels
from radixlm.kernels.extend_attention import extend_attention_torch
from radixlm.kernels.shared_prefix_attention import (
    TokenQueries,
    common_slot_prefix_len,
    decode_attention_shared_prefix_torch,
    extend_attention_shared_prefix_torch,
)
from radixlm.runtime.attention.backend import AttentionBackend
from radixlm.runtime.attention.torch_decode import (
    DecodePlan,
    decode_attention_planned,
    in_place_decode_available,
    plan_decode,
)
from radixlm.runtime.executor.forward_batch import ForwardBatch

# NOTE: below this many shared keys, reading the prefix once does not pay for the extra merge.
MIN_SHARED_PREFIX = 32
# A decode that the in-place C++ kernel serves takes the cascade only from this many shared key reads
# (shared keys x requests) on: below it, the fixed cost of the flash call and its copies outweighs
# what reading the prefix once saves (`benchmarks/kernels/shared_prefix_attention.py`, 40 private keys each:
# 301 shared at batch 64 1.10-1.17x faster, at batch 32 0.93-0.95x; 1,000 at batch 8 0.85-0.91x).
MIN_SHARED_READS_IN_PLACE = 16384


def exact_extend_attention(
    q: torch.Tensor,
    layer_id: int,
    fb: ForwardBatch,
    sm_scale: float,
    window: int | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """Per-request extend attention in plain torch over the batch's paged KV: causal, with the
    batch's image spans attending both ways, windows and soft-caps. Every backend's exact path."""
    k_buffer, v_buffer = fb.kv_pool.get_kv_buffer(layer_id)
    assert fb.extend_prefix_lens_cpu is not None and fb.extend_seq_lens_cpu is not None
    return extend_attention_torch(
        q,
        k_buffer,
        v_buffer,
        fb.req_to_token_pool.req_to_token,
        fb.req_pool_indices,
        fb.extend_prefix_lens_cpu,
        fb.extend_seq_lens_cpu,
        sm_scale,
        window,
        softcap,
        fb.image_spans,
    )


class TorchAttentionBackend(AttentionBackend):
    """Exact attention in plain torch, on any device; reads KV through ``req_to_token``.

    It never runs a Triton kernel, so ``--attention-backend torch`` means the exact path on a GPU
    too. A batch whose requests share a cached prefix (the same
    slots, courtesy of the radix tree) reads that prefix once for all of them (cascade), in decode
    and in extend. Sliding-window and soft-capped layers skip the cascade (the shared part would
    need the window and the cap too) and take the plain extend and the planned decode, as does an
    extend whose images attend both ways (``fb.image_spans``).

    A decode batch with ``fb.row_groups`` (a speculative verify step) hands them to the in-place
    kernel, which reads each request's keys once for all of its rows; ``grouped_decode_steps``
    counts those steps.
    """

    min_shared_prefix: float = MIN_SHARED_PREFIX  # deterministic mode: inf (no cascade)
    grouped_decode_steps: int = 0

    def init_forward_metadata(self, fb: ForwardBatch) -> None:
        if fb.seq_lens_cpu is None:
            fb.seq_lens_cpu = fb.seq_lens.tolist()
        self._max_seq_len = max(fb.seq_lens_cpu) if fb.seq_lens_cpu else 0
        if not fb.is_decode:
            if fb.extend_prefix_lens_cpu is None:
                fb.extend_prefix_lens_cpu = fb.extend_prefix_lens.tolist()
            if fb.extend_seq_lens_cpu is None:
                fb.extend_seq_lens_cpu = fb.extend_seq_lens.tolist()
        self._decode_plan: DecodePlan | None = None
        self._token_queries: TokenQueries | None = None
        self._decode_tail = 0 if fb.is_decode else _single_token_tail(fb.extend_seq_lens_cpu)
        in_place = in_place_decode_available(fb.kv_pool.get_kv_buffer(0)[0])
        # a cascade's private keys are read in place by the C++ kernel where it serves this pool
        self._suffix_kernels = decode_kernels_if_ready() if in_place else None
        if self._decode_tail:  # a mixed step: the prompt chunks, then the decodes' planned attention
            self._shared_len = 0
            tail = slice(len(fb.seq_lens_cpu) - self._decode_tail, None)
            self._decode_plan = plan_decode(
                fb.req_to_token_pool.req_to_token,
                fb.req_pool_indices[tail],
                fb.seq_lens[tail],
                fb.seq_lens_cpu[tail],
                in_place,
            )
            return
        # Keys every request has at the same slots, before any of this step's queries.
        self._shared_len = 0
        if len(fb.seq_lens_cpu) > 1:
            before_queries = min(fb.seq_lens_cpu) - 1 if fb.is_decode else min(fb.extend_prefix_lens_cpu)
            shared = common_slot_prefix_len(
                fb.req_to_token_pool.req_to_token, fb.req_pool_indices, before_queries
            )
            self._shared_len = shared if shared >= self.min_shared_prefix else 0
            # a row group's rows read their keys once in place: the cascade saves reads across groups
            readers = len(fb.row_groups) if fb.row_groups else len(fb.seq_lens_cpu)
            if fb.is_decode and in_place and shared * readers < MIN_SHARED_READS_IN_PLACE:
                self._shared_len = 0
        if fb.is_decode and not self._shared_len:
            self._decode_plan = plan_decode(
                fb.req_to_token_pool.req_to_token,
                fb.req_pool_indices,
                fb.seq_lens,
                fb.seq_lens_cpu,
                in_place,
                fb.row_groups,
            )
            if self._decode_plan.row_groups is not None:
                self.grouped_decode_steps += 1
        elif not fb.is_decode and self._shared_len and self._suffix_kernels is not None:
            self._token_queries = TokenQueries.of(
                fb.req_pool_indices, fb.extend_prefix_lens_cpu, fb.extend_seq_lens_cpu
            )

    def forward_extend(
        self,
        q: torch.Tensor,
        layer_id: int,
        fb: ForwardBatch,
        sm_scale: float,
        window: int | None = None,
        softcap: float | None = None,
    ) -> torch.Tensor:
        k_buffer, v_buffer = fb.kv_pool.get_kv_buffer(layer_id)
        if self._decode_tail:
            return self._forward_mixed(q, k_buffer, v_buffer, fb, sm_scale, window, softcap)
        if self._shared_len and window is None and softcap is None and fb.image_spans is None:
            return extend_attention_shared_prefix_torch(
                q,
                k_buffer,
                v_buffer,
                fb.req_to_token_pool.req_to_token,
                fb.req_pool_indices,
                fb.extend_prefix_lens_cpu,
                fb.extend_seq_lens_cpu,
                sm_scale,
                self._shared_len,
                self._kernels_for(q),
                self._token_queries,
            )
        return exact_extend_attention(q, layer_id, fb, sm_scale, window, softcap)

    def _forward_mixed(
        self,
        q: torch.Tensor,
        k_buffer: torch.Tensor,
        v_buffer: torch.Tensor,
        fb: ForwardBatch,
        sm_scale: float,
        window: int | None,
        softcap: float | None,
    ) -> torch.Tensor:
        """Prompt chunks attend as an extend, the single-token tail as one planned decode."""
        assert self._decode_plan is not None
        n_dec = self._decode_tail
        n_ext = len(fb.seq_lens_cpu) - n_dec
        assert fb.extend_prefix_lens_cpu is not None and fb.extend_seq_lens_cpu is not None
        tokens = q.shape[0] - n_dec
        parts = [
            decode_attention_planned(
                q[tokens:], k_buffer, v_buffer, self._decode_plan, sm_scale, window, softcap
            )
        ]
        if n_ext:
            head = extend_attention_torch(
                q[:tokens],
                k_buffer,
                v_buffer,
                fb.req_to_token_pool.req_to_token,
                fb.req_pool_indices[:n_ext],
                fb.extend_prefix_lens_cpu[:n_ext],
                fb.extend_seq_lens_cpu[:n_ext],
                sm_scale,
                window,
                softcap,
                None if fb.image_spans is None else fb.image_spans[:n_ext],
            )
            parts.insert(0, head)
        return torch.cat(parts) if len(parts) > 1 else parts[0]

    def forward_decode(
        self,
        q: torch.Tensor,
        layer_id: int,
        fb: ForwardBatch,
        sm_scale: float,
        window: int | None = None,
        softcap: float | None = None,
    ) -> torch.Tensor:
        k_buffer, v_buffer = fb.kv_pool.get_kv_buffer(layer_id)
        if self._shared_len and window is None and softcap is None:
            return decode_attention_shared_prefix_torch(
                q,
                k_buffer,
                v_buffer,
                fb.req_to_token_pool.req_to_token,
                fb.req_pool_indices,
                fb.seq_lens,
                sm_scale,
                self._shared_len,
                self._max_seq_len,
                self._kernels_for(q),
                fb.seq_lens_cpu,
            )
        if self._decode_plan is None:  # a cascade step's windowed or capped layer: plan once, on first use
            assert fb.seq_lens_cpu is not None, "init_forward_metadata was not called for this step"
            self._decode_plan = plan_decode(
                fb.req_to_token_pool.req_to_token,
                fb.req_pool_indices,
                fb.seq_lens,
                fb.seq_lens_cpu,
                in_place_decode_available(k_buffer),
                fb.row_groups,
            )
        return decode_attention_planned(q, k_buffer, v_buffer, self._decode_plan, sm_scale, window, softcap)

    def _kernels_for(self, q: torch.Tensor) -> DecodeKernels | None:
        """The C++ kernels for a cascade's private keys, when they serve this step and fp32 ``q``."""
        return self._suffix_kernels if q.dtype == torch.float32 else None


def _single_token_tail(extend_seq_lens: list[int]) -> int:
    """How many requests at the end of an extend batch compute one token each, when at least two do
    (decodes riding along with a prompt chunk: cheaper through the decode gather than one by one)."""
    n = 0
    for length in reversed(extend_seq_lens):
        if length != 1:
            break
        n += 1
    return n if n >= 2 else 0
