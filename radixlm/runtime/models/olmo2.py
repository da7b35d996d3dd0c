"""OLMo 2 (``Olmo2ForCausalLM``): no pre-norms; an RMSNorm on the attention output and on the MLP
output before each residual add, and q/k RMSNorms over the whole projection (all heads at once),
before rotary. The projections and the MLP are Llama's. Under tensor parallelism the q/k norms sum
their squares across ranks (``ParallelRMSNorm``)."""

from __future__ import annotations

import torch

from radixlm.runtime.executor.forward_batch import ForwardBatch
from radixlm.runtime.layers.module import Module
from radixlm.runtime.layers.rmsnorm import RMSNorm
from radixlm.runtime.layers.rotary import RotaryEmbedding
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.llama import LlamaAttention, LlamaForCausalLM, LlamaMLP, LlamaModel


class Olmo2Attention(LlamaAttention):
    qk_norm_spans_heads = True  # under tensor parallelism a ParallelRMSNorm (shard_llama)

    def __init__(self, cfg: ModelConfig, layer_id: int) -> None:
        super().__init__(cfg, layer_id)
        self.q_norm = RMSNorm(self.split_sizes[0], cfg.rms_norm_eps)
        self.k_norm = RMSNorm(self.split_sizes[1], cfg.rms_norm_eps)

    def project_qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        assert self.q_norm is not None and self.k_norm is not None
        q, k, v = self.qkv_proj(x).split(self.split_sizes, dim=-1)
        q, k = self.q_norm(q), self.k_norm(k)
        return (
            q.reshape(-1, self.num_heads, self.head_dim),
            k.reshape(-1, self.num_kv_heads, self.head_dim),
            v.view(-1, self.num_kv_heads, self.head_dim),
        )


class Olmo2DecoderLayer(Module):
    """``h + post_norm(attn(h))``, then the same around the MLP; returns ``(mlp part, residual)``
    unadded like ``LlamaDecoderLayer`` (the next layer or the final norm adds them)."""

    def __init__(self, cfg: ModelConfig, layer_id: int) -> None:
        super().__init__()
        self.self_attn = Olmo2Attention(cfg, layer_id)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = LlamaMLP(cfg)
        self.post_feedforward_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(
        self, h: torch.Tensor, residual: torch.Tensor | None, rotary: RotaryEmbedding, fb: ForwardBatch
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if residual is not None:
            h = h + residual
        h = h + self.post_attention_layernorm(self.self_attn(h, rotary, fb))
        return self.post_feedforward_layernorm(self.mlp(h)), h


class Olmo2Model(LlamaModel):
    layer_cls = Olmo2DecoderLayer


class Olmo2ForCausalLM(LlamaForCausalLM):
    model_cls = Olmo2Model
