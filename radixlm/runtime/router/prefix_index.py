"""An approximate radix tree of the prompts sent to one replica: the set of hashes of every prefix
that ends on a block boundary (``block`` tokens or characters), bounded in size, least recently used
dropped first. A match is the longest such prefix present: exact at block granularity, never more
than the replica's real cache holds only because both forget old entries (approximate by design)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

Key = str | Sequence[int]
DEFAULT_BLOCK = 16
DEFAULT_CAPACITY = 200_000  # prefix hashes per replica


def block_hashes(key: Key, block: int) -> list[int]:
    """``hash(key[:block])``, ``hash(key[:2*block])``, ... (chained, so each costs one block)."""
    out, h = [], 0
    for end in range(block, len(key) + 1, block):
        h = hash((h, key[end - block : end] if isinstance(key, str) else tuple(key[end - block : end])))
        out.append(h)
    return out


class ApproxPrefixIndex:
    """``match(key)`` -> length of the longest remembered block prefix; ``insert(key)`` remembers it."""

    def __init__(self, block: int = DEFAULT_BLOCK, capacity: int = DEFAULT_CAPACITY) -> None:
        self.block = block
        self.capacity = capacity
        self._hashes: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._hashes)

    def match(self, key: Key) -> int:
        """Elements of ``key`` (a multiple of ``block``) that this replica has probably cached."""
        matched = 0
        for i, h in enumerate(block_hashes(key, self.block)):
            if h not in self._hashes:
                break
            matched = (i + 1) * self.block
        return matched

    def insert(self, key: Key) -> None:
        for h in block_hashes(key, self.block):
            self._hashes[h] = None
            self._hashes.move_to_end(h)
        while len(self._hashes) > self.capacity:
            self._hashes.popitem(last=False)
