"""The attention backend interface: how a model layer's attention reads and writes the paged KV cache."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from radixlm.runtime.executor.forward_batch import ForwardBatch


class AttentionBackend(ABC):
    """One interface for every backend: store the new K/V, then attend (extend or decode)."""

    #: whether a decode step through this backend can be captured in a CUDA graph: its planning
    #: must not read device memory on the host nor size tensors from the batch's contents
    supports_cuda_graph: bool = False

    @abstractmethod
    def init_forward_metadata(self, fb: ForwardBatch) -> None:
        """Plan the step once, before the layers run (e.g. split sizes, max lengths)."""

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer_id: int,
        fb: ForwardBatch,
        sm_scale: float,
        window: int | None = None,
        softcap: float | None = None,
    ) -> torch.Tensor:
        """``q``: ``[T, Hq, D]``, ``k``/``v``: ``[T, Hkv, D]``; returns ``[T, Hq, D]``.

        ``window``: a sliding-window layer, whose query at position ``p`` sees only the keys at
        ``p - window < k <= p`` (every key stays in the pool: ``docs/architecture.md``, sliding
        windows); ``softcap``: scaled scores ``s`` become ``softcap * tanh(s / softcap)``.
        """
        fb.kv_pool.store(layer_id, fb.out_cache_loc, k, v)
        if fb.is_decode:
            return self.forward_decode(q, layer_id, fb, sm_scale, window=window, softcap=softcap)
        return self.forward_extend(q, layer_id, fb, sm_scale, window=window, softcap=softcap)

    @abstractmethod
    def forward_extend(
        self,
        q: torch.Tensor,
        layer_id: int,
        fb: ForwardBatch,
        sm_scale: float,
        window: int | None = None,
        softcap: float | None = None,
    ) -> torch.Tensor:
        """Attention of the step's new tokens (all requests concatenated) over prefix + new keys."""

    @abstractmethod
    def forward_decode(
        self,
        q: torch.Tensor,
        layer_id: int,
        fb: ForwardBatch,
        sm_scale: float,
        window: int | None = None,
        softcap: float | None = None,
    ) -> torch.Tensor:
        """Attention of one new token per request over all of that request's keys."""
