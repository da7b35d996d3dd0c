"""Test doubles for the radix cache tests: a set-based slot allocator that catches double frees."""

from __future__ import annotations

import torch


class FakeAllocator:
    """Slots ``1..num_slots`` in a set. ``free`` rejects a slot that is already free or unknown."""

    def __init__(self, num_slots: int = 1024) -> None:
        self.num_slots = num_slots
        self.free_set: set[int] = set(range(1, num_slots + 1))
        self.free_calls = 0

    def alloc(self, n: int) -> torch.Tensor | None:
        if n > len(self.free_set):
            return None
        taken = sorted(self.free_set)[:n]
        self.free_set.difference_update(taken)
        return torch.tensor(taken, dtype=torch.int64)

    def free(self, slots: torch.Tensor) -> None:
        self.free_calls += 1
        for s in slots.tolist():
            assert 1 <= s <= self.num_slots, f"unknown slot {s}"
            assert s not in self.free_set, f"double free of slot {s}"
            self.free_set.add(s)


def tree_content(cache) -> dict[tuple[int, ...], int]:
    """Map every cached prefix (as a tuple of token ids) to the slot of its last token."""
    out: dict[tuple[int, ...], int] = {}
    stack = [((), cache.root)]
    while stack:
        prefix, node = stack.pop()
        for child in node.children.values():
            path = prefix
            for tok, slot in zip(child.key, child.value.tolist()):
                path = path + (tok,)
                out[path] = slot
            stack.append((path, child))
    return out


def depth(node) -> int:
    """Number of tokens from the root to the end of ``node``."""
    total = 0
    while node.parent is not None:
        total += len(node.key)
        node = node.parent
    return total
