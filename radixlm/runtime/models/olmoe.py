"""OLMoE (OLMoE-1B-7B), mirroring transformers' OlmoeForCausalLM.

Llama's block with two differences: the q/k RMSNorm spans the whole q and k projections (all heads
at once, before they are split into heads), and q/k/v may be clamped to ``clip_qkv``; every layer's
feed-forward is an MoE block (``intermediate_size`` per expert, top-k renormalized when
``norm_topk_prob``).
"""

from __future__ import annotations

import dataclasses

import torch

from radixlm.runtime.executor.forward_batch import ForwardBatch
from radixlm.runtime.layers.module import Module
from radixlm.runtime.layers.rmsnorm import RMSNorm
from radixlm.runtime.layers.rotary import RotaryEmbedding
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.llama import LlamaAttention, LlamaDecoderLayer, LlamaForCausalLM, LlamaModel
from radixlm.runtime.models.moe_common import moe_block


class OlmoeAttention(LlamaAttention):
    qk_norm_spans_heads = True  # under tensor parallelism a ParallelRMSNorm (shard_llama)

    def __init__(self, cfg: ModelConfig, layer_id: int) -> None:
        super().__init__(dataclasses.replace(cfg, qk_norm=False), layer_id)
        q_size, kv_size = self.split_sizes[0], self.split_sizes[1]
        self.q_norm = RMSNorm(q_size, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(kv_size, cfg.rms_norm_eps)
        clip = cfg.hf.get("clip_qkv")
        self.clip = None if clip is None else float(clip)

    def forward(self, x: torch.Tensor, rotary: RotaryEmbedding, fb: ForwardBatch) -> torch.Tensor:
        assert self.q_norm is not None and self.k_norm is not None
        q, k, v = self.qkv_proj(x).split(self.split_sizes, dim=-1)
        q, k = self.q_norm(q.contiguous()), self.k_norm(k.contiguous())
        if self.clip is not None:
            q, k, v = (t.clamp(-self.clip, self.clip) for t in (q, k, v))
        q = q.view(-1, self.num_heads, self.head_dim)
        k = k.view(-1, self.num_kv_heads, self.head_dim)
        v = v.reshape(-1, self.num_kv_heads, self.head_dim)
        q, k = rotary(fb.positions, q, k)
        return self.o_proj(self.attn(q, k, v, fb))


class OlmoeDecoderLayer(LlamaDecoderLayer):
    def build_attention(self, cfg: ModelConfig, layer_id: int) -> Module:
        return OlmoeAttention(cfg, layer_id)

    def build_mlp(self, cfg: ModelConfig, layer_id: int) -> Module:
        return moe_block(cfg, cfg.intermediate_size, bool(cfg.hf.get("norm_topk_prob", False)))


class OlmoeModel(LlamaModel):
    layer_cls = OlmoeDecoderLayer


class OlmoeForCausalLM(LlamaForCausalLM):
    supports_cuda_graph = False  # the experts' grouping reads its per-expert counts on the host
    model_cls = OlmoeModel
