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
    ``release`` is called once the product reads only such a copy (or the pieces joined): the loader
    passes what drops the file pages behind ``blocks`` from the process (re-read if touched again)."""

    def __init__(
        self,
        blocks: torch.Tensor | list[torch.Tensor],
        fmt: str,
        in_features: int,
        release: Callable[[], None] | None = None,
    ) -> None:
        """``blocks``: the weight's blocks, or its rows in pieces (``GGUFKernels.bind_rows``: an
        expert's gate and up rows are not joined into a copy when the kernel repacks them)."""
        pieces = blocks if isinstance(blocks, list) else [blocks]
        for piece in pieces:
            check_weight(piece, gguf_blocks.GGML_TYPES[fmt], in_features)
        self.pieces, self.fmt, self.in_features = pieces, fmt, in_features
        self._release = release
        self._kernel: BoundGGUFProduct | None = None
        self._bind_if_built()

    @property
    def blocks(self) -> torch.Tensor:
        """The weight's blocks ``[N, row bytes]`` (the pieces joined: a copy when there are several)."""
        return self.pieces[0] if len(self.pieces) == 1 else torch.cat(self.pieces)

    def _bind_if_built(self) -> BoundGGUFProduct | None:
        kernels = gguf_kernels_if_ready()
        if kernels is None:
            return None
        fmt = gguf_blocks.GGML_TYPES[self.fmt]
        kernel = self._kernel = kernels.bind_rows(self.pieces, fmt, self.in_features)
        if self.bound_to_copy and self._release is not None:
            self._release()
            self._release = None
        return kernel

    @property
    def bound_to_copy(self) -> bool:
        """Whether the kernel is bound and reads a copy of its own (repacked, or the pieces joined), not
        the memory behind ``pieces``."""
        return self._kernel is not None and (self._kernel.repacked or len(self.pieces) > 1)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: float32 ``[m, in_features]`` on the CPU; returns float32 ``[m, N]``."""
        kernel = self._kernel or self._bind_if_built()
        if kernel is None:
            return F.linear(x, gguf_blocks.dequantize(self.blocks, self.fmt))
        return kernel(x)
