"""A traced program: the statements its function performed on its states, in order.

States are numbered in creation order (``s0`` is the program's own state, forks follow). Each
statement appends expressions to a state, forks it, joins forks back, or sets a variable.
``print(ir)`` lists the statements; ``ir.to_dot()`` renders the dataflow for Graphviz.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union

from radixlm.frontend.chat_template import ChatTemplate
from radixlm.frontend.ir import Constant, Expr, Gen, RoleBegin, RoleEnd, Select, VarRef


@dataclass
class Extend:
    state: int
    items: list[Expr]

    def __str__(self) -> str:
        return f"s{self.state} += " + " + ".join(repr(i) for i in self.items)


@dataclass
class Fork:
    state: int
    children: list[int]

    def __str__(self) -> str:
        return ", ".join(f"s{c}" for c in self.children) + f" = fork(s{self.state})"


@dataclass
class Join:
    state: int
    children: list[int]
    mode: str

    def __str__(self) -> str:
        kids = ", ".join(f"s{c}" for c in self.children)
        return f"join(s{self.state}, [{kids}], mode={self.mode})"


@dataclass
class SetVar:
    state: int
    name: str
    value: Any

    def __str__(self) -> str:
        return f"s{self.state}[{self.name!r}] = {self.value!r}"


Statement = Union[Extend, Fork, Join, SetVar]


@dataclass
class ProgramIR:
    """The statements of one traced run plus why it is dynamic, if it is."""

    name: str
    statements: list[Statement] = field(default_factory=list)
    #: Set when the program's control flow reads generated values (it then runs in the interpreter).
    dynamic_reason: Optional[str] = None

    @property
    def is_static(self) -> bool:
        return self.dynamic_reason is None

    def __str__(self) -> str:
        head = f"program {self.name}" + ("" if self.is_static else f"  # dynamic: {self.dynamic_reason}")
        return "\n".join([head] + [f"  {st}" for st in self.statements])

    def leading_text(self, chat_template: ChatTemplate) -> str:
        """The text the program's own state starts with before its first generation or argument
        placeholder, roles rendered (what ``run_batch`` pre-warms the cache with)."""
        text = ""
        first_turn = True
        for st in self.statements:
            if not isinstance(st, Extend) or st.state != 0:
                break
            for leaf in st.items:
                if isinstance(leaf, Constant):
                    text += leaf.value
                elif isinstance(leaf, RoleBegin):
                    text += chat_template.begin_text(leaf.role, first_turn)
                    first_turn = False
                elif isinstance(leaf, RoleEnd):
                    text += chat_template.suffix(leaf.role)
                else:
                    return text
        return text

    def to_dot(self) -> str:
        """Graphviz source: one box per statement, solid edges for state order and forks,
        dashed edges from the generation of a variable to each read of it."""
        lines = [f'digraph "{self.name}" {{', "  node [shape=box, fontname=monospace];"]
        last: dict[int, str] = {}
        producer: dict[str, str] = {}
        versions: dict[tuple[int, str], int] = {}
        for i, st in enumerate(self.statements):
            node = f"n{i}"
            lines.append(f"  {node} [label={_dot_quote(str(st))}];")
            if st.state in last:
                lines.append(f"  {last[st.state]} -> {node};")
            last[st.state] = node
            if isinstance(st, Fork):
                for child in st.children:
                    last[child] = node
            elif isinstance(st, Join):
                for child in st.children:
                    if last.get(child, node) != node:
                        lines.append(f"  {last[child]} -> {node} [style=bold];")
            elif isinstance(st, Extend):
                for leaf in st.items:
                    if isinstance(leaf, VarRef) and leaf.key in producer:
                        lines.append(f"  {producer[leaf.key]} -> {node} [style=dashed];")
                    if isinstance(leaf, (Gen, Select)) and leaf.name is not None:
                        v = versions.get((st.state, leaf.name), 0)
                        versions[(st.state, leaf.name)] = v + 1
                        producer[f"{st.state}.{leaf.name}.{v}"] = node
        lines.append("}")
        return "\n".join(lines)


def _dot_quote(text: str) -> str:
    if len(text) > 120:
        text = text[:117] + "..."
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
