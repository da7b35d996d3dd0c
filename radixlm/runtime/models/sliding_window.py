"""Which layers of a checkpoint attend through a sliding window, read from its config.json as
transformers 5 reads it.

A layer's window ``w`` lets the query at position ``p`` see the keys ``p - w < k <= p``
(``radixlm.kernels.windowed_attention``). transformers names each layer's kind in ``layer_types``
(``sliding_attention`` / ``full_attention``); older configs leave it out and each family's rule
fills it in: Mistral, Mixtral and Phi-3 window every layer, Qwen2/Qwen3 the layers from
``max_window_layers`` on (with ``use_sliding_window``), Gemma 2 every other layer starting with the
first, Gemma 3 all but every ``sliding_window_pattern``-th.
"""

from __future__ import annotations

from typing import Any

SLIDING, FULL = "sliding_attention", "full_attention"


def layer_types(hf: dict[str, Any], num_layers: int) -> list[str]:
    """Each layer's kind, ``sliding_attention`` or ``full_attention``; ValueError for a bad list."""
    arch = (hf.get("architectures") or [""])[0]
    types = hf.get("layer_types")
    if types is None:
        types = [_default_type(hf, arch, i) for i in range(num_layers)]
    if len(types) != num_layers or any(t not in (SLIDING, FULL) for t in types):
        raise ValueError(
            f"config layer_types must name {num_layers} layers, each {SLIDING!r} or {FULL!r}; got {types!r}"
        )
    return list(types)


def layer_windows(hf: dict[str, Any], num_layers: int) -> list[int | None]:
    """Each layer's sliding window in keys, None for a full-attention layer."""
    window = _window(hf)
    if window is None:
        return [None] * num_layers
    return [window if t == SLIDING else None for t in layer_types(hf, num_layers)]


def _window(hf: dict[str, Any]) -> int | None:
    arch = (hf.get("architectures") or [""])[0]
    if arch.startswith("Qwen") and not hf.get("use_sliding_window", False):
        return None
    window = hf.get("sliding_window")
    if window is None:
        return None
    if int(window) < 1:
        raise ValueError(f"config sliding_window must be a positive number of tokens, got {window!r}")
    return int(window)


def _default_type(hf: dict[str, Any], arch: str, i: int) -> str:
    if arch in ("MistralForCausalLM", "MixtralForCausalLM", "Phi3ForCausalLM"):
        return SLIDING
    if arch.startswith("Qwen"):
        return SLIDING if i >= int(hf.get("max_window_layers", 28)) else FULL
    if arch == "Gemma2ForCausalLM":
        return SLIDING if (i + 1) % 2 else FULL
    if arch == "Gemma3ForCausalLM":
        return SLIDING if (i + 1) % int(hf.get("sliding_window_pattern", 6)) else FULL
    return FULL
