"""Rotary position embeddings ("rotate half" layout, as in Hugging Face Llama/Qwen).

The frequencies of each rope variant and the per-position cos/sin table come from ``rope_scaling.py``
(``rope_inv_freq``, ``rope_cos_sin_table``). With a ``partial_rotary_factor`` only the first
``rotary_dim`` dims of each head turn: the kernels rotate those strided views and the rest pass
through. The rotation is
``radixlm.kernels.rotary.apply_rotary`` (Triton, C++ or torch); for the torch rotation the cos/sin
rows of a step's positions are gathered once here and shared by every layer (the same ``positions``
tensor), and each rotation is four elementwise ops.
"""

from __future__ import annotations

from typing import Any

import torch

from radixlm.kernels import _launch
from radixlm.kernels.rotary import StepFactors, apply_rotary
from radixlm.runtime.layers.module import Module
from radixlm.runtime.layers.rope_scaling import rope_cos_sin_table, rope_inv_freq

__all__ = ["RotaryEmbedding", "rope_inv_freq"]


class RotaryEmbedding(Module):
    """A cos/sin table ``[max_positions, rotary_dim]`` (fp32, the layout ``radixlm.kernels.rotary``
    reads) and the rotation of q and k by their positions' angles."""

    def __init__(
        self, head_dim: int, max_positions: int, theta: float, scaling: dict[str, Any] | None = None
    ) -> None:
        super().__init__()
        cache = rope_cos_sin_table(head_dim, theta, scaling, max_positions)
        self.register_buffer("cos_sin_cache", cache.to(torch.get_default_device()), persistent=False)
        self.rotary_dim = cache.shape[-1]
        # The step's positions and their (cos, sin) factors, reused by the layers after the first.
        self._positions: torch.Tensor | None = None
        self._factors: StepFactors | None = None
        self._checked_positions: torch.Tensor | None = None

    def forward(
        self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotated ``(q, k)``; ``q`` ``[T, Hq, D]``, ``k`` ``[T, Hkv, D]``, ``positions`` ``[T]``."""
        r = self.rotary_dim
        if r == q.shape[-1]:
            return self._rotate(positions, q, k)
        q_rot, k_rot = self._rotate(positions, q[..., :r], k[..., :r])
        return torch.cat([q_rot, q[..., r:]], dim=-1), torch.cat([k_rot, k[..., r:]], dim=-1)

    def _rotate(
        self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
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
