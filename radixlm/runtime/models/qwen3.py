"""Qwen3 (dense): the Llama layout with a per-head RMSNorm on q and k before rotary."""
from __future__ import annotations

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.llama import LlamaForCausalLM


class Qwen3ForCausalLM(LlamaForCausalLM):
    @classmethod
    def attention_options(cls, cfg: ModelConfig) -> tuple[bool, bool, bool]:
        return cfg.attention_bias, cfg.attention_bias, True
