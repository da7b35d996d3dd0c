"""The Triton attention backend (GPU): paged decode with split-KV and extend with a cached prefix."""

from __future__ import annotations

import torch

from radixlm.kernels.decode_attention import decode_attention_triton, default_num_kv_splits
from radixlm.kernels.extend_attention import ExtendMetadata, build_extend_metadata, extend_attention_triton
from radixlm.runtime.attention.backend import AttentionBackend
from radixlm.runtime.attention.torch_backend import exact_extend_attention
from radixlm.runtime.executor.forward_batch import ForwardBatch


class TritonAttentionBackend(AttentionBackend):
    """Calls the ``*_triton`` kernels; plans each step once in ``init_forward_metadata``.

    Decode needs no host-side planning and never reads device memory on the host, so a decode step
    can be captured in a CUDA graph. Extend builds the flat metadata (start offsets of each
    request's new tokens) once per step for all layers. Both kernels take a layer's sliding window
    (the first key index rises) and logit soft-cap. An extend whose images attend both ways
    (``fb.image_spans``, Gemma 3) takes the exact torch path instead.
    """

    supports_cuda_graph = True

    def __init__(self, num_kv_splits: int | None = None) -> None:
        self.num_kv_splits = num_kv_splits  # None: chosen per batch size and KV heads
        self._extend_meta: ExtendMetadata | None = None

    def init_forward_metadata(self, fb: ForwardBatch) -> None:
        if fb.is_decode:
            self._extend_meta = None
            return
        if fb.extend_seq_lens_cpu is None:
            fb.extend_seq_lens_cpu = fb.extend_seq_lens.tolist()
        if fb.image_spans is not None and fb.extend_prefix_lens_cpu is None:
            fb.extend_prefix_lens_cpu = fb.extend_prefix_lens.tolist()
        self._extend_meta = build_extend_metadata(
            fb.extend_prefix_lens, fb.extend_seq_lens, max(fb.extend_seq_lens_cpu, default=0)
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
        assert self._extend_meta is not None, "init_forward_metadata was not called for this step"
        if fb.image_spans is not None:  # the kernel is causal: images that attend both ways go exact
            return exact_extend_attention(q, layer_id, fb, sm_scale, window, softcap)
        k_buffer, v_buffer = fb.kv_pool.get_kv_buffer(layer_id)
        return extend_attention_triton(
            q,
            k_buffer,
            v_buffer,
            fb.req_to_token_pool.req_to_token,
            fb.req_pool_indices,
            self._extend_meta,
            sm_scale,
            window=window,
            softcap=softcap,
        )

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
        splits = self.num_kv_splits or default_num_kv_splits(fb.batch_size, k_buffer.shape[1], q.device)
        return decode_attention_triton(
            q,
            k_buffer,
            v_buffer,
            fb.req_to_token_pool.req_to_token,
            fb.req_pool_indices,
            fb.seq_lens,
            sm_scale,
            num_kv_splits=splits,
            window=window,
            softcap=softcap,
        )
