"""A fused projection (q/k/v, gate/up) whose stacked parts are served in different formats.

A GGUF file quantizes each checkpoint tensor on its own: a Q4_K_M file keeps q_proj and k_proj in
Q4_K and v_proj in Q6_K in some layers. ``StackedLinear`` serves each part from its own blocks (a
``GGUFLinear``, or a float ``Linear`` for a format without a kernel) and concatenates the outputs,
so no part is rounded a second time to share one format with the others.
"""

from __future__ import annotations

import torch
from torch import nn

from radixlm.runtime.layers.module import Module


def out_features_of(layer: nn.Module) -> int:
    """Output features of a ``GGUFLinear``/``Int8Linear`` (``out_features``) or a float ``Linear``."""
    features = getattr(layer, "out_features", None)
    return int(features) if features is not None else int(layer.weight.shape[0])


class StackedLinear(Module):
    """``y = concat(part_1(x), part_2(x), ...) (+ b)`` over the output features."""

    def __init__(self, parts: list[nn.Module], bias: torch.Tensor | None = None) -> None:
        super().__init__()
        self.parts = nn.ModuleList(parts)
        self.out_sizes = [out_features_of(p) for p in parts]
        self.out_features = sum(self.out_sizes)
        self.bias = None if bias is None else bias.detach().float().contiguous()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.cat([part(x) for part in self.parts], dim=-1)
        if self.bias is not None:
            y += self.bias
        return y

    def project(self, x: torch.Tensor) -> torch.Tensor:
        return self(x)
