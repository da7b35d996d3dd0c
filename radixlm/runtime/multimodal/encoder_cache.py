"""Image encoder outputs by content hash, bounded in bytes, least recently used out first."""

from __future__ import annotations

from collections import OrderedDict

import torch


class EncoderCache:
    """``get``/``put`` of ``[tokens, hidden]`` tensors keyed by an image's content hash."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"encoder cache size must be >= 0 bytes, got {max_bytes}")
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, torch.Tensor] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> torch.Tensor | None:
        value = self._entries.get(key)
        if value is None:
            self.misses += 1
            return None
        self.hits += 1
        self._entries.move_to_end(key)
        return value

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def put(self, key: str, value: torch.Tensor) -> None:
        """Keep ``value`` unless it alone exceeds the bound; evicts the least recently used first."""
        size = value.numel() * value.element_size()
        if size > self.max_bytes:
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old.numel() * old.element_size()
        while self._entries and self._bytes + size > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= evicted.numel() * evicted.element_size()
        self._entries[key] = value
        self._bytes += size

    @property
    def num_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)
