"""Choose the prefix cache by the ``--disable-radix-cache`` flag."""

from __future__ import annotations

import torch

from radixlm.radix.no_radix_cache import NoRadixCache
from radixlm.radix.prefix_cache import PrefixCache, SlotFreer
from radixlm.radix.radix_cache import RadixCache


def create_prefix_cache(
    allocator: SlotFreer, disabled: bool = False, device: str | torch.device | None = None
) -> PrefixCache:
    """A ``NoRadixCache`` when ``disabled``, else a ``RadixCache``; both free evicted slots into
    ``allocator``."""
    cls = NoRadixCache if disabled else RadixCache
    return cls(allocator, device)
