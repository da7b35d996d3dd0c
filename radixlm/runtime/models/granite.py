"""IBM Granite 3.x (``GraniteForCausalLM``): the Llama block with four scalars from the config.

``embedding_multiplier`` scales the embeddings, ``residual_multiplier`` each attention and MLP output
before its residual add, ``attention_multiplier`` is the attention's softmax scale (instead of
``head_dim ** -0.5``), and the logits are divided by ``logits_scaling``.
"""

from __future__ import annotations

import torch

from radixlm.runtime.executor.forward_batch import ForwardBatch
from radixlm.runtime.layers.rotary import RotaryEmbedding
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.llama import (
    LlamaAttention,
    LlamaDecoderLayer,
    LlamaForCausalLM,
    LlamaMLP,
    LlamaModel,
)


def _multiplier(cfg: ModelConfig, key: str) -> float:
    return float(cfg.hf.get(key, 1.0))


class GraniteAttention(LlamaAttention):
    def __init__(self, cfg: ModelConfig, layer_id: int) -> None:
        super().__init__(cfg, layer_id)
        self.attn.scaling = _multiplier(cfg, "attention_multiplier")
        self.residual_multiplier = _multiplier(cfg, "residual_multiplier")

    def forward(self, x: torch.Tensor, rotary: RotaryEmbedding, fb: ForwardBatch) -> torch.Tensor:
        return super().forward(x, rotary, fb) * self.residual_multiplier


class GraniteMLP(LlamaMLP):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.residual_multiplier = _multiplier(cfg, "residual_multiplier")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * self.residual_multiplier


class GraniteDecoderLayer(LlamaDecoderLayer):
    attention_cls = GraniteAttention
    mlp_cls = GraniteMLP


class GraniteModel(LlamaModel):
    layer_cls = GraniteDecoderLayer

    def __init__(self, cfg: ModelConfig, max_positions: int) -> None:
        super().__init__(cfg, max_positions)
        self.embedding_multiplier = _multiplier(cfg, "embedding_multiplier")

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return super().embed(input_ids) * self.embedding_multiplier


class GraniteForCausalLM(LlamaForCausalLM):
    model_cls = GraniteModel

    def __init__(self, cfg: ModelConfig, max_positions: int | None = None) -> None:
        super().__init__(cfg, max_positions)
        self.logits_scaling = _multiplier(cfg, "logits_scaling")

    def compute_logits(self, h: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return super().compute_logits(h, residual) / self.logits_scaling
