"""GGUF (llama.cpp) tensor names and layouts -> Hugging Face names and layouts."""

from __future__ import annotations

import re

import numpy as np

_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
# per-architecture names that differ from (or add to) the Llama ones
_ARCH_LAYER_NAMES = {
    "gemma": {
        "post_attention_norm": "post_attention_layernorm",
        "ffn_norm": "pre_feedforward_layernorm",
        "post_ffw_norm": "post_feedforward_layernorm",
    },
    "olmo2": {
        "post_attention_norm": "post_attention_layernorm",
        "post_ffw_norm": "post_feedforward_layernorm",
    },
    # fused tensors: ``GGUFSource`` cuts them into the projections (see ``fused_parts``)
    "phi3": {"attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"},
    # stacked experts ``[experts, rows, in]``: served one expert at a time (``experts.{e}.gate_proj``)
    "moe": {
        "ffn_gate_inp": "mlp.gate",
        "ffn_gate_exps": "mlp.experts.gate_proj",
        "ffn_up_exps": "mlp.experts.up_proj",
        "ffn_down_exps": "mlp.experts.down_proj",
    },
}
_NAME_FAMILY = {
    "gemma2": "gemma",
    "gemma3": "gemma",
    "olmo2": "olmo2",
    "phi3": "phi3",
    "qwen3moe": "moe",
    "olmoe": "moe",
    "llama": "moe",
}
_LAYER_RE = re.compile(r"^blk\.(\d+)\.(\w+)\.(weight|bias)$")
# Tensors llama.cpp adds that have no Hugging Face counterpart (rope factors live in config.json).
_SKIPPED = {"rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight"}


def hf_tensor_name(gguf_name: str, arch: str = "llama") -> str | None:
    """The Hugging Face name of a GGUF tensor, or None for tensors HF checkpoints do not have.

    Raises ValueError for a tensor we do not know (better than silently dropping a weight).
    """
    if gguf_name in _SKIPPED:
        return None
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    names = _LAYER_NAMES | _ARCH_LAYER_NAMES.get(_NAME_FAMILY.get(arch, ""), {})
    m = _LAYER_RE.match(gguf_name)
    if m and m.group(2) in names:
        return f"model.layers.{m.group(1)}.{names[m.group(2)]}.{m.group(3)}"
    raise ValueError(f"unsupported GGUF tensor {gguf_name!r} for architecture {arch!r}")


def fused_parts(hf_name: str, config: dict) -> list[tuple[str, int]] | None:
    """The projections a fused tensor's rows hold, in order, as ``(hf_name, rows)``; None if unfused.

    Phi-3 keeps q/k/v in one ``attn_qkv`` and gate/up in one ``ffn_up``, as its HF checkpoint does."""
    prefix, _, leaf = hf_name.rpartition(".")
    prefix, _, module = prefix.rpartition(".")
    head_dim = config["head_dim"]
    q, kv = config["num_attention_heads"] * head_dim, config["num_key_value_heads"] * head_dim
    inter = config["intermediate_size"]
    sizes = {
        "qkv_proj": (("q_proj", q), ("k_proj", kv), ("v_proj", kv)),
        "gate_up_proj": (("gate_proj", inter), ("up_proj", inter)),
    }.get(module)
    return None if sizes is None else [(f"{prefix}.{part}.{leaf}", rows) for part, rows in sizes]


def expert_name(hf_name: str, expert: int) -> str:
    """``...mlp.experts.gate_proj.weight`` -> ``...mlp.experts.{expert}.gate_proj.weight``."""
    prefix, _, rest = hf_name.partition(".experts.")
    return f"{prefix}.experts.{expert}.{rest}"


def norm_offset(arch: str) -> float:
    """What llama.cpp's converter added to every ``*norm.weight``: Gemma applies ``1 + w`` and the
    file stores ``1 + w``; our Gemma model (like transformers) takes ``w``."""
    return 1.0 if arch in ("gemma2", "gemma3") else 0.0


def unpermute_rope(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation for rotary embeddings.

    llama.cpp's converter reorders each head's rows from HF's "rotate half" layout (first half,
    second half) to interleaved pairs: it reshapes to ``[heads, 2, head_dim/2, ...]`` and swaps
    axes 1 and 2. The inverse reshapes to ``[heads, head_dim/2, 2, ...]`` and swaps them back.
    Works for weights ``[heads*head_dim, hidden]`` and biases ``[heads*head_dim]``.
    """
    half = weight.shape[0] // num_heads // 2
    w = weight.reshape(num_heads, half, 2, *weight.shape[1:])
    return np.ascontiguousarray(w.swapaxes(1, 2).reshape(weight.shape))
