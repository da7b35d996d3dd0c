"""How much a regex's counted repeats multiply it, read from the text before any engine compiles it.

An automaton grows with each counted repeat's count, and nested repeats multiply: ``(a{99}){99}``
is 11 bytes and 9801 states. ``repeat_cost`` returns both the largest product of counts along one
nesting path and the expanded size (atoms after unrolling every count), so that a limit can refuse a
pattern that is small as text but huge as an automaton. ``*``, ``+`` and ``?`` do not unroll.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_COUNT = re.compile(r"\{\s*(\d+)\s*(?:(,)\s*(\d*)\s*)?\}")


@dataclass
class _Group:
    size: int = 0  # atoms in the group so far (unrolled)
    product: int = 1  # largest product of counts inside it
    last_size: int = 0  # the atom or group a quantifier would apply to
    last_product: int = 1


def repeat_cost(regex: str) -> tuple[int, int]:
    """``(largest nested product of counts, expanded size in atoms)`` of ``regex``.

    Over-estimates rather than under-estimates (an alternation counts all branches); escapes and
    character classes count as one atom. Unbalanced parentheses are left to the engine to reject.
    """
    stack = [_Group()]
    i, n = 0, len(regex)
    while i < n:
        c, top = regex[i], stack[-1]
        if c == "\\":
            i = _atom(top, i + 2)
        elif c == "[":
            i = _atom(top, _class_end(regex, i))
        elif c == "(":
            stack.append(_Group())
            i += 1
        elif c == ")" and len(stack) > 1:
            inner = stack.pop()
            parent = stack[-1]
            parent.size += inner.size
            parent.last_size, parent.last_product = inner.size, inner.product
            parent.product = max(parent.product, inner.product)
            i += 1
        elif c == "{" and (m := _COUNT.match(regex, i)) is not None:
            low, comma, high = m.groups()
            count = max(int(high) if comma and high else int(low), 1)
            top.size += top.last_size * (count - 1)
            top.last_size *= count
            top.last_product *= count
            top.product = max(top.product, top.last_product)
            i = m.end()
        elif c in "*+?|":
            i += 1
        else:
            i = _atom(top, i + 1)
    while len(stack) > 1:  # unbalanced: fold what is open
        inner = stack.pop()
        stack[-1].size += inner.size
        stack[-1].product = max(stack[-1].product, inner.product)
    return stack[0].product, stack[0].size


def _atom(group: _Group, end: int) -> int:
    group.size += 1
    group.last_size, group.last_product = 1, 1
    return end


def _class_end(regex: str, start: int) -> int:
    """The index after the character class opening at ``start``."""
    i = start + 1
    if i < len(regex) and regex[i] == "^":
        i += 1
    if i < len(regex) and regex[i] == "]":
        i += 1
    while i < len(regex) and regex[i] != "]":
        i += 2 if regex[i] == "\\" else 1
    return i + 1
