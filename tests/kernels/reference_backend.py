"""An attention backend that always calls the plain torch references, on any device.

``TorchAttentionBackend`` reads a prefix shared by the batch once (cascade attention); this one
attends per request with no such shortcut, so it checks the cascade path and the Triton kernels alike.
"""

from __future__ import annotations

from radixlm.kernels.decode_attention import decode_attention_torch
from radixlm.runtime.attention.torch_backend import TorchAttentionBackend, exact_extend_attention


class ReferenceAttentionBackend(TorchAttentionBackend):
    def forward_extend(self, q, layer_id, fb, sm_scale, window=None, softcap=None):
        return exact_extend_attention(q, layer_id, fb, sm_scale, window, softcap)

    def forward_decode(self, q, layer_id, fb, sm_scale, window=None, softcap=None):
        k_buffer, v_buffer = fb.kv_pool.get_kv_buffer(layer_id)
        return decode_attention_torch(
            q,
            k_buffer,
            v_buffer,
            fb.req_to_token_pool.req_to_token,
            fb.req_pool_indices,
            fb.seq_lens,
            sm_scale,
            max(fb.seq_lens_cpu),
            window,
            softcap,
        )
