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


def join_rows(blocks: list[torch.Tensor]) -> tuple[torch.Tensor, bool]:
    """The row blocks ``blocks`` (each ``[rows, row bytes]``, same row bytes) stacked, and whether that
    copied them. Parts that lie back to back in one storage (a GGUF file's consecutive tensors, such
    as ``ffn_gate`` then ``ffn_up``) are joined as one view of it: no copy, no new memory."""
    first = blocks[0]
    storage = first.untyped_storage()
    adjacent = all(b.is_contiguous() and b.untyped_storage().data_ptr() == storage.data_ptr() for b in blocks)
    adjacent = adjacent and all(
        a.shape[1:] == b.shape[1:] and a.data_ptr() + a.nbytes == b.data_ptr()
        for a, b in zip(blocks, blocks[1:])
    )
    if not adjacent:
        return torch.cat(blocks), True
    rows = sum(int(b.shape[0]) for b in blocks)
    joined = first.new_empty(0).set_(
        storage, first.storage_offset(), (rows, *first.shape[1:]), first.stride()
    )
    return joined, False


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
