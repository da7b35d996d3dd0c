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
_LAYER_RE = re.compile(r"^blk\.(\d+)\.(\w+)\.(weight|bias)$")
# Tensors llama.cpp adds that have no Hugging Face counterpart (rope factors live in config.json).
_SKIPPED = {"rope_freqs.weight"}


def hf_tensor_name(gguf_name: str) -> str | None:
    """The Hugging Face name of a GGUF tensor, or None for tensors HF checkpoints do not have.

    Raises ValueError for a tensor we do not know (better than silently dropping a weight).
    """
    if gguf_name in _SKIPPED:
        return None
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    m = _LAYER_RE.match(gguf_name)
    if m and m.group(2) in _LAYER_NAMES:
        return f"model.layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}.{m.group(3)}"
    raise ValueError(f"unsupported GGUF tensor {gguf_name!r}")


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
