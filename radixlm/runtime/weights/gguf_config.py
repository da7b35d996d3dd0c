"""A Hugging Face ``config.json`` dict built from a GGUF file's metadata."""

from __future__ import annotations

from typing import Any

import numpy as np
from gguf import GGUFReader

from radixlm.runtime.weights.gguf_families import add_family_fields

# GGUF architecture -> (HF architectures entry, HF model_type, llama.cpp permuted Q/K rows)
GGUF_ARCHITECTURES: dict[str, tuple[str, str, bool]] = {
    "llama": ("LlamaForCausalLM", "llama", True),
    "qwen2": ("Qwen2ForCausalLM", "qwen2", False),
    "qwen3": ("Qwen3ForCausalLM", "qwen3", False),
    "gemma2": ("Gemma2ForCausalLM", "gemma2", False),
    "gemma3": ("Gemma3ForCausalLM", "gemma3_text", False),
    "phi3": ("Phi3ForCausalLM", "phi3", False),
    "qwen3moe": ("Qwen3MoeForCausalLM", "qwen3_moe", False),
    "granite": ("GraniteForCausalLM", "granite", True),
    "olmo2": ("Olmo2ForCausalLM", "olmo2", False),
    "smollm3": ("SmolLM3ForCausalLM", "smollm3", True),
    "olmoe": ("OlmoeForCausalLM", "olmoe", False),
}


def gguf_field(reader: GGUFReader, key: str, default: Any = None) -> Any:
    """The decoded value of a metadata field, or ``default`` when absent."""
    field = reader.get_field(key)
    return default if field is None else field.contents()


def gguf_architecture(reader: GGUFReader) -> str:
    arch = gguf_field(reader, "general.architecture")
    if arch not in GGUF_ARCHITECTURES:
        raise ValueError(
            f"unsupported GGUF architecture {arch!r}; supported: {', '.join(sorted(GGUF_ARCHITECTURES))}"
        )
    return arch


def hf_config_from_gguf(reader: GGUFReader) -> dict[str, Any]:
    """Translate the GGUF metadata into the config.json a Hugging Face checkpoint would carry."""
    arch = gguf_architecture(reader)
    hf_arch, model_type, _ = GGUF_ARCHITECTURES[arch]

    def meta(key: str, default: Any = None) -> Any:
        return gguf_field(reader, f"{arch}.{key}", default)

    tensor_names = {t.name for t in reader.tensors}
    embed = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
    if embed is None:
        raise ValueError("the GGUF file has no token_embd.weight tensor")
    hidden = int(meta("embedding_length"))
    num_heads = int(meta("attention.head_count"))
    rope_theta = float(meta("rope.freq_base", 10000.0))
    config: dict[str, Any] = {
        "architectures": [hf_arch],
        "model_type": model_type,
        "hidden_size": hidden,
        "intermediate_size": int(meta("feed_forward_length", meta("expert_feed_forward_length", 0))),
        "num_hidden_layers": int(meta("block_count")),
        "num_attention_heads": num_heads,
        "num_key_value_heads": int(meta("attention.head_count_kv", num_heads)),
        "head_dim": int(meta("attention.key_length", hidden // num_heads)),
        "vocab_size": int(embed.shape[-1]),  # GGUF shapes are innermost-first: [hidden, vocab]
        "max_position_embeddings": int(meta("context_length", 2048)),
        "rms_norm_eps": float(meta("attention.layer_norm_rms_epsilon", 1e-6)),
        "rope_theta": rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": rope_theta},
        "hidden_act": "silu",
        "tie_word_embeddings": "output.weight" not in tensor_names,
        "torch_dtype": "float32",
    }
    scaling_type = meta("rope.scaling.type")
    if scaling_type == "linear":
        factor = float(meta("rope.scaling.factor"))
        config["rope_parameters"] = {"rope_type": "linear", "factor": factor, "rope_theta": rope_theta}
    elif scaling_type not in (None, "none"):
        raise ValueError(f"unsupported GGUF rope scaling {scaling_type!r}")
    freqs = next((t for t in reader.tensors if t.name == "rope_freqs.weight"), None)
    if freqs is not None:  # Llama 3.x: llama.cpp divides each inverse frequency by its factor
        factors = [float(f) for f in np.asarray(freqs.data, dtype=np.float32).reshape(-1)]
        config["rope_parameters"] = {
            "rope_type": "freq_factors",
            "rope_theta": rope_theta,
            "factors": factors,
        }
    add_family_fields(arch, meta, reader, config)
    for key in ("bos_token_id", "eos_token_id", "padding_token_id"):
        value = gguf_field(reader, f"tokenizer.ggml.{key}")
        if value is not None:
            config[key.replace("padding", "pad")] = int(value)
    return config
