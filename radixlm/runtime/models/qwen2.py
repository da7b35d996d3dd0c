"""Qwen2 / Qwen2.5: the Llama layout with biases on q/k/v (none on o_proj)."""
from __future__ import annotations

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.llama import LlamaForCausalLM


class Qwen2ForCausalLM(LlamaForCausalLM):
    @classmethod
    def attention_options(cls, cfg: ModelConfig) -> tuple[bool, bool, bool]:
        return True, False, False
