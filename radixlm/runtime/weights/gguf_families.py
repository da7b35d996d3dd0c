"""The config.json fields each GGUF architecture adds to the Llama-like base ``gguf_config`` builds.

llama.cpp's converter keeps some of a family's config only in its code (Gemma 3's every-sixth global
layer and local rope base, Gemma's attention scale, Qwen3-MoE's renormalized top-k, SmolLM3's NoPE
layers): the values here
are the ones llama.cpp's runtime assumes for such a file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from gguf import GGUFReader

Meta = Callable[..., Any]  # meta(key, default=None): the value of ``{arch}.{key}``


def add_family_fields(arch: str, meta: Meta, reader: GGUFReader, config: dict[str, Any]) -> None:
    """Fill ``config`` (already holding the shared fields) with ``arch``'s own."""
    window = meta("attention.sliding_window")
    if window is not None:
        config["sliding_window"] = int(window)
    if arch in ("gemma2", "gemma3"):
        _gemma(arch, meta, config)
    elif arch == "phi3":
        _phi3(meta, reader, config)
    elif arch in ("qwen3moe", "olmoe") or (arch == "llama" and meta("expert_count")):
        _experts(arch, meta, config)
    elif arch == "llama" and window is not None:
        config["architectures"], config["model_type"] = ["MistralForCausalLM"], "mistral"
    elif arch == "smollm3":
        _smollm3(meta, config)
    elif arch == "granite":
        for key, field in (
            ("attention.scale", "attention_multiplier"),
            ("embedding_scale", "embedding_multiplier"),
            ("residual_scale", "residual_multiplier"),
            ("logit_scale", "logits_scaling"),
        ):
            if meta(key) is not None:
                config[field] = float(meta(key))


def _gemma(arch: str, meta: Meta, config: dict[str, Any]) -> None:
    config["hidden_activation"] = config["hidden_act"] = "gelu_pytorch_tanh"
    # llama.cpp scales queries by head_dim ** -0.5 (hidden/heads for the 27B models, whose
    # query_pre_attn_scalar transformers' config gives as such)
    scalar = config["head_dim"]
    if config["num_hidden_layers"] in (46, 62):  # Gemma 2 27B, Gemma 3 27B
        scalar = config["hidden_size"] // config["num_attention_heads"]
    config["query_pre_attn_scalar"] = scalar
    if arch == "gemma2":
        for key in ("attn_logit_softcapping", "final_logit_softcapping"):
            if meta(key) is not None:
                config[key] = float(meta(key))
        return
    pattern = meta("attention.sliding_window_pattern", 6)
    if isinstance(pattern, list):  # per layer: True where the layer attends through the window
        config["layer_types"] = ["sliding_attention" if p else "full_attention" for p in pattern]
    else:
        config["sliding_window_pattern"] = int(pattern)
    full = dict(config["rope_parameters"])
    local = {"rope_type": "default", "rope_theta": float(meta("rope.freq_base_swa", 10000.0))}
    config["rope_parameters"] = {"full_attention": full, "sliding_attention": local}
    config["rope_local_base_freq"] = local["rope_theta"]


def _phi3(meta: Meta, reader: GGUFReader, config: dict[str, Any]) -> None:
    rotary = meta("rope.dimension_count")
    if rotary is not None and int(rotary) != config["head_dim"]:
        config["partial_rotary_factor"] = int(rotary) / config["head_dim"]
    factors = {
        t.name: [float(f) for f in np.asarray(t.data, dtype=np.float32).reshape(-1)]
        for t in reader.tensors
        if t.name in ("rope_factors_long.weight", "rope_factors_short.weight")
    }
    if not factors:
        return
    if len(factors) != 2:
        raise ValueError("a Phi-3 GGUF file needs both rope_factors_long and rope_factors_short")
    rope: dict[str, Any] = {
        "rope_type": "longrope",
        "rope_theta": config["rope_theta"],
        "long_factor": factors["rope_factors_long.weight"],
        "short_factor": factors["rope_factors_short.weight"],
    }
    original = meta("rope.scaling.original_context_length")
    if original is not None:
        config["original_max_position_embeddings"] = int(original)
    if meta("rope.scaling.attn_factor") is not None:
        rope["attention_factor"] = float(meta("rope.scaling.attn_factor"))
    config["rope_parameters"] = rope


def _smollm3(meta: Meta, config: dict[str, Any]) -> None:
    # llama.cpp hard-codes NoPE on every fourth layer (no GGUF key); a file may still list them per layer
    flags = meta("no_rope_layers")
    if isinstance(flags, list):
        config["no_rope_layers"] = [int(f) for f in flags]
    config["no_rope_layer_interval"] = 4
    config["use_sliding_window"] = False


def _experts(arch: str, meta: Meta, config: dict[str, Any]) -> None:
    experts, used = meta("expert_count"), meta("expert_used_count")
    if experts is None or used is None:
        raise ValueError(f"a {arch} mixture-of-experts GGUF file needs expert_count and expert_used_count")
    config["num_experts_per_tok"] = int(used)
    if arch == "llama":  # Mixtral: llama.cpp's llama architecture with experts
        config["architectures"], config["model_type"] = ["MixtralForCausalLM"], "mixtral"
        config["num_local_experts"] = int(experts)
        return
    config["num_experts"] = int(experts)
    if arch == "olmoe":  # every layer's experts are feed_forward_length wide; llama.cpp does not renormalize
        config["norm_topk_prob"] = False
        return
    config["moe_intermediate_size"] = int(meta("expert_feed_forward_length"))
    config["norm_topk_prob"] = True  # llama.cpp renormalizes Qwen3-MoE's top-k weights
    config["decoder_sparse_step"], config["mlp_only_layers"] = 1, []
