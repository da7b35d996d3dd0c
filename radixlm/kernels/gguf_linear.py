"""Products with GGUF block weights: the one dispatch point of ``x @ W^T`` for ``W`` as blocks."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from radixlm.kernels.cpu import gguf_blocks
from radixlm.kernels.cpu.build import gguf_kernels_if_ready
from radixlm.kernels.cpu.gguf_ops import BoundGGUFProduct, check_weight


class GGUFProduct:
    """``x @ W^T`` for one weight ``W`` kept as GGUF blocks ``[N, row bytes]`` of ``fmt``.

    The C++ kernel (``cpu/gguf_linear.cpp``: activations quantized to int8 blocks of 32) serves once
    it is built; until then (a background build) each call dequantizes the blocks with torch and
    multiplies in fp32, so a model loaded during a build uses the kernel as soon as it is ready.

    The kernel is bound at construction when it is already built, so a weight the kernel repacks
    (Q4_0 in groups of eight rows) is repacked while the model loads, not in the first request.
    ``release`` is called once the product reads only such a copy: the loader passes what drops the
    file pages behind ``blocks`` from the process (they are re-read if touched again)."""

    def __init__(
        self, blocks: torch.Tensor, fmt: str, in_features: int, release: Callable[[], None] | None = None
    ) -> None:
        check_weight(blocks, gguf_blocks.GGML_TYPES[fmt], in_features)
        self.blocks, self.fmt, self.in_features = blocks, fmt, in_features
        self._release = release
        self._kernel: BoundGGUFProduct | None = None
        self._bind_if_built()

    def _bind_if_built(self) -> BoundGGUFProduct | None:
        kernels = gguf_kernels_if_ready()
        if kernels is None:
            return None
        kernel = self._kernel = kernels.bind(self.blocks, gguf_blocks.GGML_TYPES[self.fmt], self.in_features)
        if kernel.repacked and self._release is not None:
            self._release()
            self._release = None
        return kernel

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: float32 ``[m, in_features]`` on the CPU; returns float32 ``[m, N]``."""
        kernel = self._kernel or self._bind_if_built()
        if kernel is None:
            return F.linear(x, gguf_blocks.dequantize(self.blocks, self.fmt))
        return kernel(x)
