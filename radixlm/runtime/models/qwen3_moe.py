"""Qwen3-MoE (Qwen3-30B-A3B, Qwen3-235B-A22B), mirroring transformers' Qwen3MoeForCausalLM.

Qwen3's attention (per-head q/k RMSNorm) with MoE feed-forwards (``moe_intermediate_size`` per
expert; the top-k weights renormalized when ``norm_topk_prob``). A layer listed in
``mlp_only_layers``, or whose index + 1 is not a multiple of ``decoder_sparse_step``, keeps a dense
MLP of ``intermediate_size``, as in transformers.
"""

from __future__ import annotations

import dataclasses

from radixlm.runtime.layers.module import Module
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.llama import LlamaDecoderLayer, LlamaForCausalLM, LlamaMLP, LlamaModel
from radixlm.runtime.models.moe_common import moe_block, num_experts


def is_sparse_layer(cfg: ModelConfig, layer_id: int) -> bool:
    """Whether layer ``layer_id`` has the MoE block (transformers' rule)."""
    step = int(cfg.hf.get("decoder_sparse_step") or 1)
    dense = set(cfg.hf.get("mlp_only_layers") or [])
    return layer_id not in dense and num_experts(cfg) > 0 and (layer_id + 1) % step == 0


class Qwen3MoeDecoderLayer(LlamaDecoderLayer):
    def build_mlp(self, cfg: ModelConfig, layer_id: int) -> Module:
        if is_sparse_layer(cfg, layer_id):
            renormalize = bool(cfg.hf.get("norm_topk_prob", False))
            return moe_block(cfg, int(cfg.hf["moe_intermediate_size"]), renormalize)
        return LlamaMLP(cfg)


class Qwen3MoeModel(LlamaModel):
    layer_cls = Qwen3MoeDecoderLayer


class Qwen3MoeForCausalLM(LlamaForCausalLM):
    supports_cuda_graph = False  # the experts' grouping reads its per-expert counts on the host
    model_cls = Qwen3MoeModel

    def __init__(self, cfg: ModelConfig, max_positions: int | None = None) -> None:
        super().__init__(dataclasses.replace(cfg, qk_norm=True), max_positions)
