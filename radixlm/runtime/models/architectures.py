"""Hugging Face ``architectures`` names -> our model classes (their differences are ``ModelConfig`` flags)."""

from __future__ import annotations

from torch import nn

from radixlm.runtime.models.gemma import GemmaForCausalLM
from radixlm.runtime.models.llama import LlamaForCausalLM

MODEL_CLASSES: dict[str, type[nn.Module]] = {
    "LlamaForCausalLM": LlamaForCausalLM,
    "MistralForCausalLM": LlamaForCausalLM,
    "Qwen2ForCausalLM": LlamaForCausalLM,  # q/k/v biases: ModelConfig.qkv_bias
    "Qwen3ForCausalLM": LlamaForCausalLM,  # per-head q/k norm: ModelConfig.qk_norm
    "Gemma2ForCausalLM": GemmaForCausalLM,
    "Gemma3ForCausalLM": GemmaForCausalLM,  # text only (Gemma3TextConfig)
}


def get_model_class(architecture: str) -> type[nn.Module]:
    """The class implementing ``architecture``; ValueError listing the supported ones otherwise."""
    try:
        return MODEL_CLASSES[architecture]
    except KeyError:
        raise ValueError(
            f"unsupported model architecture {architecture!r}; supported: {', '.join(sorted(MODEL_CLASSES))}"
        ) from None
