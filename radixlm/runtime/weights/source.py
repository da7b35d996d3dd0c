"""Where a model's weights come from: one ``WeightSource`` per checkpoint format.

A source gives the Hugging Face config dict, the generation config, and the tensors one at a time under
Hugging Face names, each in its stored format: a float ``torch.Tensor`` (any float dtype; the loader
converts it to the serving dtype when it copies it into place) or a ``BlockTensor`` (GGUF blocks our
kernel reads, served as they are or dequantized, as the quantization plan decides).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from radixlm.kernels.cpu import gguf_blocks


@dataclass
class BlockTensor:
    """A weight ``[out, in]`` stored as GGUF blocks: ``blocks`` uint8 ``[out, row bytes]`` of ``fmt``
    (often a read-only view into a memory-mapped file: never written)."""

    fmt: str
    blocks: torch.Tensor
    in_features: int
    # drops the file pages behind ``blocks`` from this process once they were copied elsewhere
    release: Callable[[], None] = field(default=lambda: None, repr=False)

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.blocks.shape[0]), self.in_features)

    def dequantize(self) -> torch.Tensor:
        """The float32 values ``[out, in]``."""
        return gguf_blocks.dequantize(self.blocks, self.fmt)


StoredTensor = torch.Tensor | BlockTensor


def as_float(tensor: StoredTensor) -> torch.Tensor:
    """A float tensor with the stored values (GGUF blocks dequantized)."""
    return tensor.dequantize() if isinstance(tensor, BlockTensor) else tensor


class WeightSource(Protocol):
    """One checkpoint (a Hugging Face directory or a GGUF file), read lazily."""

    path: str

    def hf_config(self) -> dict[str, Any]:
        """The ``config.json`` dict (GGUF: translated from the file's metadata)."""
        ...

    def generation_config(self) -> dict[str, Any]:
        """``generation_config.json`` (empty when there is none)."""
        ...

    def main_format(self) -> str | None:
        """The block format most linear weights are stored in when our kernel reads it, else None."""
        ...

    def tensors(self) -> Iterator[tuple[str, StoredTensor]]:
        """``(hf_name, tensor)`` for every tensor, one at a time, in the stored format."""
        ...
