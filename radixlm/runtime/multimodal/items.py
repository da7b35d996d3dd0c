"""One request's images: the preprocessed crops, content hashes and where their tokens sit in the prompt."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where pixels are hashed: the messages module stays torch-free
    import torch

PAD_RANGE = 1 << 30  # pad ids are vocab_size + (hash mod PAD_RANGE): never a real token, int32-safe


@dataclass
class ImageItem:
    """One image: ``pixels`` ``[crops, C, H, W]`` and ``pixel_mask`` ``[crops, H, W]`` as the processor
    made them, ``num_tokens`` prompt tokens it fills, ``key`` the hex content hash (the encoder
    cache's key)."""

    key: str
    pixels: torch.Tensor
    pixel_mask: torch.Tensor | None
    num_tokens: int

    def pad_value(self, vocab_size: int) -> int:
        """The id its tokens carry in the prompt: equal for equal images, so the radix cache shares a
        prefix through the same image and (but for a 2^-30 collision) never through a different one."""
        return vocab_size + int(self.key[:15], 16) % PAD_RANGE


def content_key(pixels: torch.Tensor, pixel_mask: torch.Tensor | None) -> str:
    """sha256 of the preprocessed pixels (and mask): what the encoder actually sees."""
    digest = hashlib.sha256(pixels.contiguous().float().numpy().tobytes())
    digest.update(str(tuple(pixels.shape)).encode())
    if pixel_mask is not None:
        import torch

        digest.update(pixel_mask.contiguous().to(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


@dataclass
class MultimodalInputs:
    """``positions``: the prompt indices of all image tokens, in order; image ``i`` fills the next
    ``items[i].num_tokens`` of them."""

    items: list[ImageItem] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)

    def padded(self, ids: list[int], vocab_size: int) -> list[int]:
        """``ids`` with each image's tokens replaced by its pad value."""
        out = list(ids)
        k = 0
        for item in self.items:
            pad = item.pad_value(vocab_size)
            for pos in self.positions[k : k + item.num_tokens]:
                out[pos] = pad
            k += item.num_tokens
        return out

    def rows_in(self, start: int, end: int) -> list[tuple[int, int, int]]:
        """``(prompt position, item index, row in the item's output)`` per image token in
        ``[start, end)``."""
        out = []
        k = 0
        for i, item in enumerate(self.items):
            for row in range(item.num_tokens):
                pos = self.positions[k]
                k += 1
                if start <= pos < end:
                    out.append((pos, i, row))
        return out
