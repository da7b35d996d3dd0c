"""The attention op of a model layer: hands q/k/v to the batch's attention backend."""

from __future__ import annotations

import torch

from radixlm.kernels.windowed_attention import check_window_softcap
from radixlm.runtime.executor.forward_batch import ForwardBatch
from radixlm.runtime.layers.module import Module


class RadixAttention(Module):
    """Stores this layer's new K/V in the paged pool and attends over each request's cached tokens.

    Takes ``q`` ``[T, Hq, D]``, ``k``/``v`` ``[T, Hkv, D]`` (rotary already applied) and returns
    ``[T, Hq * D]``. ``scaling`` defaults to ``head_dim ** -0.5``; ``sliding_window`` (keys a query
    sees, itself included) and ``logit_softcap`` are None for plain causal attention.
    """

    def __init__(
        self,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        layer_id: int,
        scaling: float | None = None,
        sliding_window: int | None = None,
        logit_softcap: float | None = None,
    ) -> None:
        super().__init__()
        check_window_softcap(sliding_window, logit_softcap)
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.layer_id = layer_id
        self.scaling = head_dim**-0.5 if scaling is None else scaling
        self.sliding_window = sliding_window
        self.logit_softcap = logit_softcap

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        out = fb.attn_backend.forward(
            q, k, v, self.layer_id, fb, self.scaling, window=self.sliding_window, softcap=self.logit_softcap
        )
        return out.reshape(q.shape[0], self.num_heads * self.head_dim)
