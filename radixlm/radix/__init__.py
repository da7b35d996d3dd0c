"""The radix tree prefix cache. Imports nothing from ``radixlm.runtime`` or ``radixlm.frontend``."""

from __future__ import annotations

from radixlm.radix.factory import create_prefix_cache
from radixlm.radix.no_radix_cache import NoRadixCache
from radixlm.radix.prefix_cache import MatchResult, PrefixCache, SlotFreer
from radixlm.radix.radix_cache import RadixCache
from radixlm.radix.tree_node import TreeNode

__all__ = [
    "MatchResult",
    "NoRadixCache",
    "PrefixCache",
    "RadixCache",
    "SlotFreer",
    "TreeNode",
    "create_prefix_cache",
]
