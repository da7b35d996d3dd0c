"""Products with GGUF block weights: the one dispatch point of ``x @ W^T`` for ``W`` as blocks."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from radixlm.kernels.cpu import gguf_blocks
from radixlm.kernels.cpu.build import gguf_kernels_if_ready
from radixlm.kernels.cpu.gguf_ops import BoundGGUFProduct, check_weight


class GGUFProduct:
    """``x @ W^T`` for one weight ``W`` kept as GGUF blocks ``[N, row bytes]`` of ``fmt``.

    The C++ kernel (``cpu/gguf_linear.cpp``: activations quantized to int8 blocks of 32) serves once
    it is built; until then (a background build) each call dequantizes the blocks with torch and
    multiplies in fp32, so a model loaded during a build uses the kernel as soon as it is ready."""

    def __init__(self, blocks: torch.Tensor, fmt: str, in_features: int) -> None:
        check_weight(blocks, gguf_blocks.GGML_TYPES[fmt], in_features)
        self.blocks, self.fmt, self.in_features = blocks, fmt, in_features
        self._kernel: BoundGGUFProduct | None = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: float32 ``[m, in_features]`` on the CPU; returns float32 ``[m, N]``."""
        kernel = self._kernel
        if kernel is None:
            kernels = gguf_kernels_if_ready()
            if kernels is None:
                return F.linear(x, gguf_blocks.dequantize(self.blocks, self.fmt))
            kernel = self._kernel = kernels.bind(
                self.blocks, gguf_blocks.GGML_TYPES[self.fmt], self.in_features
            )
        return kernel(x)
