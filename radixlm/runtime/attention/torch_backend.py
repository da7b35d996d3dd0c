"""The torch attention backend: exact attention on any device, with cascade reads of a shared prefix."""
from __future__ import annotations

import torch

from radixlm.kernels.extend_attention import extend_attention_torch
from radixlm.kernels.shared_prefix_attention import (
    common_slot_prefix_len,
    decode_attention_shared_prefix_torch,
    extend_attention_shared_prefix_torch,
)
from radixlm.runtime.attention.backend import AttentionBackend
from radixlm.runtime.attention.torch_decode import DecodePlan, decode_attention_planned, plan_decode
from radixlm.runtime.forward_batch import ForwardBatch

# NOTE: below this many shared keys, reading the prefix once does not pay for the extra merge.
MIN_SHARED_PREFIX = 32


class TorchAttentionBackend(AttentionBackend):
    """Exact attention in plain torch, on any device; reads KV through ``req_to_token``.

    It never runs a Triton kernel, so ``--attention-backend torch`` means the exact path on a GPU
    too. A batch whose requests share a cached prefix (the same
    slots, courtesy of the radix tree) reads that prefix once for all of them (cascade), in decode
    and in extend.
    """

    def init_forward_metadata(self, fb: ForwardBatch) -> None:
        if fb.seq_lens_cpu is None:
            fb.seq_lens_cpu = fb.seq_lens.tolist()
        self._max_seq_len = max(fb.seq_lens_cpu) if fb.seq_lens_cpu else 0
        if not fb.is_decode:
            if fb.extend_prefix_lens_cpu is None:
                fb.extend_prefix_lens_cpu = fb.extend_prefix_lens.tolist()
            if fb.extend_seq_lens_cpu is None:
                fb.extend_seq_lens_cpu = fb.extend_seq_lens.tolist()
        # Keys every request has at the same slots, before any of this step's queries.
        self._shared_len = 0
        if len(fb.seq_lens_cpu) > 1:
            before_queries = min(fb.seq_lens_cpu) - 1 if fb.is_decode else min(fb.extend_prefix_lens_cpu)
            shared = common_slot_prefix_len(fb.req_to_token_pool.req_to_token, fb.req_pool_indices,
                                            before_queries)
            self._shared_len = shared if shared >= MIN_SHARED_PREFIX else 0
        self._decode_plan: DecodePlan | None = None
        if fb.is_decode and not self._shared_len:
            self._decode_plan = plan_decode(fb.req_to_token_pool.req_to_token, fb.req_pool_indices,
                                            fb.seq_lens, fb.seq_lens_cpu)

    def forward_extend(self, q: torch.Tensor, layer_id: int, fb: ForwardBatch,
                       sm_scale: float) -> torch.Tensor:
        k_buffer, v_buffer = fb.kv_pool.get_kv_buffer(layer_id)
        if self._shared_len:
            return extend_attention_shared_prefix_torch(
                q, k_buffer, v_buffer, fb.req_to_token_pool.req_to_token, fb.req_pool_indices,
                fb.extend_prefix_lens_cpu, fb.extend_seq_lens_cpu, sm_scale, self._shared_len)
        return extend_attention_torch(q, k_buffer, v_buffer, fb.req_to_token_pool.req_to_token,
                                      fb.req_pool_indices, fb.extend_prefix_lens_cpu,
                                      fb.extend_seq_lens_cpu, sm_scale)

    def forward_decode(self, q: torch.Tensor, layer_id: int, fb: ForwardBatch,
                       sm_scale: float) -> torch.Tensor:
        k_buffer, v_buffer = fb.kv_pool.get_kv_buffer(layer_id)
        if self._shared_len:
            return decode_attention_shared_prefix_torch(
                q, k_buffer, v_buffer, fb.req_to_token_pool.req_to_token, fb.req_pool_indices,
                fb.seq_lens, sm_scale, self._shared_len, self._max_seq_len)
        assert self._decode_plan is not None, "init_forward_metadata was not called for this step"
        return decode_attention_planned(q, k_buffer, v_buffer, self._decode_plan, sm_scale)
