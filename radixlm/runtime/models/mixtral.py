"""Mixtral (8x7B, 8x22B), mirroring transformers' MixtralForCausalLM.

Mistral's attention with an MoE feed-forward in every layer (``intermediate_size`` per expert, the
top-k weights always renormalized). Checkpoints name the block ``block_sparse_moe`` and an expert's
projections ``w1`` (gate), ``w3`` (up), ``w2`` (down); ``load_weights`` renames them to ours. As for
Mistral, a sliding window is not applied (exact for contexts within the window).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from radixlm.runtime.layers.module import Module
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.llama import LlamaDecoderLayer, LlamaForCausalLM, LlamaModel
from radixlm.runtime.models.moe_common import moe_block

_EXPERT_PROJECTIONS = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}


def our_name(name: str) -> str:
    """``layers.0.block_sparse_moe.experts.3.w1.weight`` -> ``layers.0.mlp.experts.3.gate_proj.weight``."""
    parts = name.split(".")
    if "block_sparse_moe" not in parts:
        return name
    parts = ["mlp" if p == "block_sparse_moe" else p for p in parts]
    if len(parts) >= 4 and parts[-4] == "experts" and parts[-2] in _EXPERT_PROJECTIONS:
        parts[-2] = _EXPERT_PROJECTIONS[parts[-2]]
    return ".".join(parts)


class MixtralDecoderLayer(LlamaDecoderLayer):
    def build_mlp(self, cfg: ModelConfig, layer_id: int) -> Module:
        return moe_block(cfg, cfg.intermediate_size, renormalize=True)


class MixtralModel(LlamaModel):
    layer_cls = MixtralDecoderLayer


class MixtralForCausalLM(LlamaForCausalLM):
    supports_cuda_graph = False  # the experts' grouping reads its per-expert counts on the host
    model_cls = MixtralModel

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        super().load_weights((our_name(name), tensor) for name, tensor in weights)
