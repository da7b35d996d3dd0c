"""A bounded JSON picture of the radix tree for the web UI's server view (``/ui/api/server``)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from radixlm.radix.tree_node import TreeNode

HEAD_TOKENS = 12  # token ids kept per node, for a text preview


def tree_snapshot(root: TreeNode, max_nodes: int, holders: Iterable[tuple[str, Any]] = ()) -> dict[str, Any]:
    """The tree breadth-first, at most ``max_nodes`` nodes besides the root (shallow ones first).

    Each node (its id is its index in ``nodes``; the root is 0): ``parent`` (an index), ``tokens`` (its key's
    length), ``head`` (its first token ids), ``lock_ref``, ``last_access`` and ``held_by`` (rids
    of the ``holders``, ``(rid, last_node)`` pairs, whose locked path passes through it).
    ``truncated`` says nodes were left out. Cost: O(nodes kept + holders x depth): it stops at the
    cap, so it stays cheap on a big tree.
    """
    if max_nodes < 0:
        raise ValueError(f"max_nodes must be >= 0, got {max_nodes}")
    held: dict[int, list[str]] = {}
    for rid, node in holders:
        step = node
        while step is not None and step is not root:
            held.setdefault(id(step), []).append(rid)
            step = step.parent
    nodes: list[dict[str, Any]] = [_entry(root, None, held)]
    queue: deque[tuple[TreeNode, int]] = deque([(root, 0)])
    truncated = False
    while queue and not truncated:
        node, index = queue.popleft()
        for child in node.children.values():
            if len(nodes) > max_nodes:
                truncated = True
                break
            nodes.append(_entry(child, index, held))
            queue.append((child, len(nodes) - 1))
    return {"nodes": nodes, "truncated": truncated}


def _entry(node: TreeNode, parent: int | None, held: dict[int, list[str]]) -> dict[str, Any]:
    return {
        "parent": parent,
        "tokens": len(node.key),
        "head": list(node.key[:HEAD_TOKENS]),
        "lock_ref": node.lock_ref,
        "last_access": node.last_access,
        "held_by": held.get(id(node), []),
    }
