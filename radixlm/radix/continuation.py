"""What the radix tree holds after a sequence: the tokens other requests produced after the same
context, read without touching the tree (no split, no LRU update, no lock)."""

from __future__ import annotations

from collections.abc import Sequence

from radixlm.radix.key import as_key, common_prefix_len
from radixlm.radix.tree_node import TreeNode


def continuation(root: TreeNode, token_ids: Sequence[int], k: int) -> list[int]:
    """Up to ``k`` tokens that follow the whole of ``token_ids`` in the tree under ``root``; where the
    tree branches, the most recently used branch. Empty when the tree does not hold all of
    ``token_ids`` or nothing follows them."""
    if k <= 0:
        return []
    key = as_key(token_ids)
    node, pos, out = root, 0, []
    while pos < len(key):
        child = node.children.get(key[pos])
        if child is None:
            return []
        n = common_prefix_len(child.key, key, pos)
        pos += n
        node = child
        if n < len(child.key):
            if pos < len(key):  # the tree diverges from the sequence inside this node
                return []
            out = list(child.key[n : n + k])
    while len(out) < k and node.children:
        node = max(node.children.values(), key=lambda c: c.last_access)
        out.extend(node.key[: k - len(out)])
    return out
