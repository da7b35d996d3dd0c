"""What the mixture-of-experts families share: their MoE block built from ``config.json`` fields."""

from __future__ import annotations

from radixlm.runtime.layers.moe import SparseMoeBlock
from radixlm.runtime.models.config import ModelConfig


def num_experts(cfg: ModelConfig) -> int:
    """Experts per MoE layer: ``num_experts`` (Qwen3-MoE, OLMoE) or ``num_local_experts`` (Mixtral;
    transformers 5 also saves Qwen3-MoE's under this name)."""
    value = cfg.hf.get("num_experts", cfg.hf.get("num_local_experts"))
    if value is None:
        raise ValueError(f"{cfg.architecture} config.json has neither num_experts nor num_local_experts")
    return int(value)


def moe_block(cfg: ModelConfig, intermediate_size: int, renormalize: bool) -> SparseMoeBlock:
    """A ``SparseMoeBlock`` of ``num_experts(cfg)`` SiLU experts, ``num_experts_per_tok`` per token."""
    if cfg.hidden_act != "silu":
        raise ValueError(f"unsupported hidden_act {cfg.hidden_act!r} for {cfg.architecture} (only silu)")
    top_k = cfg.hf.get("num_experts_per_tok")
    if top_k is None:
        raise ValueError(f"{cfg.architecture} config.json has no num_experts_per_tok")
    return SparseMoeBlock(cfg.hidden_size, intermediate_size, num_experts(cfg), int(top_k), renormalize)
