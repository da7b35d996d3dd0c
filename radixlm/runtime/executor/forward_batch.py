"""The batch a model forward reads: token ids, positions and the attention metadata.

Models never look at requests; they read this object, and the attention backend reads the KV
layout from it. Extend (prefill, possibly on top of a cached prefix) and decode (one new token per
request) are the two modes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

import torch

from radixlm.runtime.memory.kv_pool import KVPool
from radixlm.runtime.memory.req_to_token_pool import ReqToTokenPool


class ForwardMode(enum.Enum):
    EXTEND = "extend"
    DECODE = "decode"


class LayerAttention(Protocol):
    """What a model layer calls to attend: implemented by ``runtime.attention.backend.AttentionBackend``.

    Declared here, not imported, so the batch does not depend on the backends that read it.
    """

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
    ) -> torch.Tensor: ...


@dataclass
class ForwardBatch:
    """Inputs of one forward step over ``bs`` requests and ``num_tokens`` new tokens.

    Tensors live on the model's device; index tensors are int64.

    - ``input_ids``/``positions``: ``[num_tokens]``, the new tokens of all requests, concatenated in
      request order.
    - ``req_pool_indices``: ``[bs]`` rows of ``req_to_token`` owned by the requests.
    - ``seq_lens``: ``[bs]`` sequence length of each request *after* this step (prefix + new tokens).
    - ``extend_prefix_lens``/``extend_seq_lens``: ``[bs]`` tokens already in the KV cache and new
      tokens in this step (decode: ``seq_lens - 1`` and ones).
    - ``out_cache_loc``: ``[num_tokens]`` KV slots that receive the new tokens' K and V. The slots
      are already written into ``req_to_token`` at positions ``prefix_len .. seq_len-1``.
    - ``logits_indices``: ``[num_outputs]`` positions into the token axis whose logits are returned
      (the last token of each request, or all tokens when input logprobs are asked for); a decode
      step returning every row lists them in order, ``arange`` (``returns_all_rows``).
    - ``lora_slots``: per request, the LoRA device slot its tokens use (-1: the base model); None: all
      base (``runtime/lora/manager.py`` turns it into per-token segments).
    - ``row_groups``: a decode batch whose consecutive rows extend one request (a speculative verify
      step, one row per draft position): the sizes of those runs, in row order (None: one row per
      request). The in-place decode kernel reads a run's keys once for all of its rows.
    """

    mode: ForwardMode
    input_ids: torch.Tensor
    positions: torch.Tensor
    req_pool_indices: torch.Tensor
    seq_lens: torch.Tensor
    extend_prefix_lens: torch.Tensor
    extend_seq_lens: torch.Tensor
    out_cache_loc: torch.Tensor
    logits_indices: torch.Tensor
    req_to_token_pool: ReqToTokenPool
    kv_pool: KVPool
    attn_backend: LayerAttention
    # Host-side copies, so backends can plan without device syncs.
    seq_lens_cpu: list[int] | None = None
    extend_prefix_lens_cpu: list[int] | None = None
    extend_seq_lens_cpu: list[int] | None = None
    # Image rows (multimodal models): the token-axis indices ``[k]`` whose input rows are ``mm_embeds``
    # ``[k, hidden]`` instead of their tokens' embeddings (``runtime/multimodal/``).
    mm_positions: torch.Tensor | None = None
    mm_embeds: torch.Tensor | None = None
    # Per request, the ``[start, end)`` prompt positions among this step's new tokens that attend to
    # each other both ways (Gemma 3's images, ``runtime/multimodal/image_spans.py``); None: causal.
    image_spans: list[list[tuple[int, int]]] | None = None
    lora_slots: list[int] | None = None
    row_groups: list[int] | None = None

    @property
    def batch_size(self) -> int:
        return int(self.req_pool_indices.shape[0])

    @property
    def is_decode(self) -> bool:
        return self.mode is ForwardMode.DECODE

    def returns_all_rows(self, num_tokens: int) -> bool:
        """Whether ``logits_indices`` is every one of the ``num_tokens`` rows in order: a decode step
        (one token a request, and the decode builders' indices are ``arange``), so a model can skip
        gathering them."""
        return self.mode is ForwardMode.DECODE and int(self.logits_indices.shape[0]) == num_tokens
