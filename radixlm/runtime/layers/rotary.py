"""Rotary position embeddings ("rotate half" layout, as in Hugging Face Llama/Qwen).

Supports the default rope, linear position scaling and Llama 3 frequency scaling; the rotation
itself is ``radixlm.kernels.rotary.apply_rotary``.
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from radixlm.kernels.rotary import apply_rotary, build_cos_sin_cache


def rope_inv_freq(head_dim: int, theta: float, scaling: dict[str, Any] | None) -> torch.Tensor:
    """Inverse frequencies ``[head_dim / 2]`` (fp32) for the rope variant in ``scaling``."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    rope_type = (scaling or {}).get("rope_type") or (scaling or {}).get("type") or "default"
    if rope_type == "default":
        return inv_freq
    if rope_type == "linear":
        return inv_freq / float(scaling["factor"])
    if rope_type == "llama3":
        return _llama3_inv_freq(inv_freq, scaling)
    raise ValueError(f"unsupported rope scaling type {rope_type!r} (supported: default, linear, llama3)")


def _llama3_inv_freq(inv_freq: torch.Tensor, scaling: dict[str, Any]) -> torch.Tensor:
    """Llama 3.1: divide low frequencies by ``factor``, keep high ones, blend the band between."""
    factor = float(scaling["factor"])
    low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    old_len = float(scaling["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return torch.where(is_medium, smoothed, scaled)


class RotaryEmbedding(nn.Module):
    """A cos/sin table ``[max_positions, head_dim]`` (fp32, the layout ``radixlm.kernels.rotary``
    reads) and the rotation of q and k by their positions' angles."""

    def __init__(self, head_dim: int, max_positions: int, theta: float,
                 scaling: dict[str, Any] | None = None) -> None:
        super().__init__()
        cache = build_cos_sin_cache(rope_inv_freq(head_dim, theta, scaling), max_positions,
                                    torch.get_default_device())
        self.register_buffer("cos_sin_cache", cache, persistent=False)

    def forward(self, positions: torch.Tensor, q: torch.Tensor,
                k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotated ``(q, k)``; ``q`` ``[T, Hq, D]``, ``k`` ``[T, Hkv, D]``, ``positions`` ``[T]``."""
        return apply_rotary(q, k, positions, self.cos_sin_cache)
