"""Hugging Face ``architectures`` names -> our model classes (Llama-family differences are ``ModelConfig``
flags and rope dicts; the other dense architectures are small subclasses of ``LlamaForCausalLM``)."""

from __future__ import annotations

from torch import nn

from radixlm.runtime.models.gemma import GemmaForCausalLM
from radixlm.runtime.models.granite import GraniteForCausalLM
from radixlm.runtime.models.llama import LlamaForCausalLM
from radixlm.runtime.models.llama_pooled import LlamaEmbeddingModel, LlamaForSequenceClassification
from radixlm.runtime.models.mixtral import MixtralForCausalLM
from radixlm.runtime.models.olmo2 import Olmo2ForCausalLM
from radixlm.runtime.models.olmoe import OlmoeForCausalLM
from radixlm.runtime.models.phi3 import Phi3ForCausalLM
from radixlm.runtime.models.qwen3_moe import Qwen3MoeForCausalLM
from radixlm.runtime.models.smollm3 import SmolLM3ForCausalLM
from radixlm.runtime.models.vision.gemma3 import Gemma3ForConditionalGeneration
from radixlm.runtime.models.vision.idefics3 import Idefics3ForConditionalGeneration

MODEL_CLASSES: dict[str, type[nn.Module]] = {
    "LlamaForCausalLM": LlamaForCausalLM,
    "MistralForCausalLM": LlamaForCausalLM,
    "Qwen2ForCausalLM": LlamaForCausalLM,  # q/k/v biases: ModelConfig.qkv_bias
    "Qwen3ForCausalLM": LlamaForCausalLM,  # per-head q/k norm: ModelConfig.qk_norm
    "Phi3ForCausalLM": Phi3ForCausalLM,
    "GraniteForCausalLM": GraniteForCausalLM,
    "Olmo2ForCausalLM": Olmo2ForCausalLM,
    "SmolLM3ForCausalLM": SmolLM3ForCausalLM,
    "Qwen3MoeForCausalLM": Qwen3MoeForCausalLM,
    "MixtralForCausalLM": MixtralForCausalLM,
    "OlmoeForCausalLM": OlmoeForCausalLM,
    "Gemma2ForCausalLM": GemmaForCausalLM,
    "Gemma3ForCausalLM": GemmaForCausalLM,  # text only (Gemma3TextConfig)
    # embeddings and scores (--is-embedding): a bare decoder, a last-token score head
    "LlamaModel": LlamaEmbeddingModel,
    "MistralModel": LlamaEmbeddingModel,
    "Qwen2Model": LlamaEmbeddingModel,
    "Qwen3Model": LlamaEmbeddingModel,
    "LlamaForSequenceClassification": LlamaForSequenceClassification,
    "MistralForSequenceClassification": LlamaForSequenceClassification,
    "Qwen2ForSequenceClassification": LlamaForSequenceClassification,
    "Qwen3ForSequenceClassification": LlamaForSequenceClassification,
    "Idefics3ForConditionalGeneration": Idefics3ForConditionalGeneration,  # SmolVLM: images in
    "Gemma3ForConditionalGeneration": Gemma3ForConditionalGeneration,  # Gemma 3 4B-27B: images in
}


def get_model_class(architecture: str) -> type[nn.Module]:
    """The class implementing ``architecture``; ValueError listing the supported ones otherwise."""
    try:
        return MODEL_CLASSES[architecture]
    except KeyError:
        raise ValueError(
            f"unsupported model architecture {architecture!r}; supported: {', '.join(sorted(MODEL_CLASSES))}"
        ) from None
