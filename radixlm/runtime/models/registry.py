"""Hugging Face ``architectures`` names -> our model classes."""
from __future__ import annotations

from torch import nn

from radixlm.runtime.models.llama import LlamaForCausalLM
from radixlm.runtime.models.qwen2 import Qwen2ForCausalLM
from radixlm.runtime.models.qwen3 import Qwen3ForCausalLM

MODEL_CLASSES: dict[str, type[nn.Module]] = {
    "LlamaForCausalLM": LlamaForCausalLM,
    "MistralForCausalLM": LlamaForCausalLM,
    "Qwen2ForCausalLM": Qwen2ForCausalLM,
    "Qwen3ForCausalLM": Qwen3ForCausalLM,
}


def get_model_class(architecture: str) -> type[nn.Module]:
    """The class implementing ``architecture``; ValueError listing the supported ones otherwise."""
    try:
        return MODEL_CLASSES[architecture]
    except KeyError:
        raise ValueError(f"unsupported model architecture {architecture!r}; supported: "
                         f"{', '.join(sorted(MODEL_CLASSES))}") from None
