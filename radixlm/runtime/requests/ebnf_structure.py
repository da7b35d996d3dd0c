"""The shape of an ``ebnf`` grammar (GBNF or Lark), read as text before any native library sees it.

llguidance walks a grammar's rules recursively: a chain of a few thousand rules (``r0 ::= r1 "x"``,
``r1 ::= r2 "x"``, ...) overflows its native stack and kills the process. ``grammar_shape`` counts the
rules, the longest chain of rule references (the depth of the rule graph, cycles cut) and the deepest
nesting of parentheses and brackets, so that limits can refuse such a grammar with a 400.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_RULE = re.compile(r"^[ \t]*[?!]?([A-Za-z_][\w-]*)(?:\.-?\d+)?[ \t]*(?:::=|:(?!:))", re.MULTILINE)
_LITERAL = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|/(?:\\.|[^/\\\n])+/[imslux]*')
_NAME = re.compile(r"[A-Za-z_][\w-]*")
_COMMENT = re.compile(r"(?:#|//)[^\n]*")


@dataclass(frozen=True)
class GrammarShape:
    rules: int
    depth: int  # rules on the longest chain of references (cycles cut)
    nesting: int  # deepest nesting of ( and [ inside one rule


def grammar_shape(text: str) -> GrammarShape:
    """Rule count, rule-graph depth and bracket nesting of GBNF or Lark ``text`` (over-estimates
    rather than under-estimates; syntax errors are left to the grammar compiler)."""
    text = _LITERAL.sub('""', text)
    text = _COMMENT.sub("", text)
    heads = list(_RULE.finditer(text))
    bodies: dict[str, str] = {}
    for i, head in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        name = head.group(1)
        bodies[name] = bodies.get(name, "") + " " + text[head.end() : end]
    edges = {name: {r for r in _NAME.findall(body) if r in bodies} for name, body in bodies.items()}
    nesting = max((_nesting(body) for body in bodies.values()), default=0)
    return GrammarShape(rules=len(heads), depth=_depth(edges), nesting=nesting)


def _nesting(body: str) -> int:
    level = deepest = 0
    for c in body:
        if c in "([":
            level += 1
            deepest = max(deepest, level)
        elif c in ")]":
            level = max(level - 1, 0)
    return deepest


def _depth(edges: dict[str, set[str]]) -> int:
    """Longest chain of references, iteratively (the grammar may be deep enough to overflow recursion).
    An edge back to a rule still being explored (a cycle) is cut."""
    depth: dict[str, int] = {}
    on_path: set[str] = set()
    for root in edges:
        if root in depth:
            continue
        stack: list[tuple[str, list[str]]] = [(root, list(edges[root]))]
        on_path.add(root)
        while stack:
            node, todo = stack[-1]
            while todo and (todo[-1] in depth or todo[-1] in on_path):
                todo.pop()
            if todo:
                child = todo.pop()
                on_path.add(child)
                stack.append((child, list(edges[child])))
                continue
            stack.pop()
            on_path.discard(node)
            depth[node] = 1 + max((depth[c] for c in edges[node] if c in depth), default=0)
    return max(depth.values(), default=0)
