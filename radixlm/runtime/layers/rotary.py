"""Rotary position embeddings ("rotate half" layout, as in Hugging Face Llama/Qwen).

Supports the default rope, linear position scaling and Llama 3 frequency scaling. The rotation is
``radixlm.kernels.rotary.apply_rotary`` (Triton, C++ or torch); for the torch rotation the cos/sin
rows of a step's positions are gathered once here and shared by every layer (the same ``positions``
tensor), and each rotation is four elementwise ops.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from radixlm.kernels import _launch
from radixlm.kernels.rotary import StepFactors, apply_rotary, build_cos_sin_cache
from radixlm.runtime.layers.module import Module


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
    if rope_type == "freq_factors":  # llama.cpp's rope_freqs (Llama 3.x GGUF files)
        return inv_freq / torch.tensor(scaling["factors"], dtype=torch.float32)
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


class RotaryEmbedding(Module):
    """A cos/sin table ``[max_positions, head_dim]`` (fp32, the layout ``radixlm.kernels.rotary``
    reads) and the rotation of q and k by their positions' angles."""

    def __init__(
        self, head_dim: int, max_positions: int, theta: float, scaling: dict[str, Any] | None = None
    ) -> None:
        super().__init__()
        cache = build_cos_sin_cache(
            rope_inv_freq(head_dim, theta, scaling), max_positions, torch.get_default_device()
        )
        self.register_buffer("cos_sin_cache", cache, persistent=False)
        # The step's positions and their (cos, sin) factors, reused by the layers after the first.
        self._positions: torch.Tensor | None = None
        self._factors: StepFactors | None = None
        self._checked_positions: torch.Tensor | None = None

    def forward(
        self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotated ``(q, k)``; ``q`` ``[T, Hq, D]``, ``k`` ``[T, Hkv, D]``, ``positions`` ``[T]``."""
        if _launch.use_triton(q):
            return apply_rotary(q, k, positions, self.cos_sin_cache)
        self._check_positions(positions)
        return apply_rotary(q, k, positions, self.cos_sin_cache, lambda: self._step_factors(positions))

    def _check_positions(self, positions: torch.Tensor) -> None:
        """Once per ``positions`` tensor (a forward passes one to all its layers): every position
        has a row in the table."""
        if positions is self._checked_positions:
            return
        limit = self.cos_sin_cache.shape[0]
        if positions.numel() and not 0 <= int(positions.min()) <= int(positions.max()) < limit:
            raise ValueError(f"positions must be in [0, {limit}) (the rotary table's length)")
        self._checked_positions = positions

    def _step_factors(self, positions: torch.Tensor) -> StepFactors:
        """``cos`` ``[T, 1, 2, D/2]`` (cos twice) and ``sin`` (``-sin`` then ``sin``), built once per
        ``positions`` tensor: a forward passes the same one to all its layers."""
        if positions is not self._positions or self._factors is None:
            half = self.cos_sin_cache.shape[-1] // 2
            cs = self.cos_sin_cache.index_select(0, positions).view(-1, 1, 2, half)
            cos, sin = cs[:, :, :1], cs[:, :, 1:]
            self._factors = (cos.expand(-1, 1, 2, half).contiguous(), torch.cat([-sin, sin], dim=2))
            self._positions = positions
        return self._factors
