"""A traced program (``ProgramIR``): the statements its function ran on its states, in order.

States are numbered in creation order (``s0`` is the program's own state; forks and the states of
programs it calls follow). Each statement appends expressions to a state, forks it, joins forks
back, sets a variable, or starts the state of a called ``@function`` (``Call``).

``print(ir)`` lists the statements; ``ir.to_dot()`` renders the dataflow for Graphviz;
``ir.last_node.print_graph_dfs()`` prints SGLang's view: one numbered node per leaf, each written
after the nodes it depends on (``%3 = %2 + gen('answer')``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from radixlm.frontend.chat_template import ChatTemplate, Turns
from radixlm.frontend.ir import Argument, Constant, Expr, RoleBegin, RoleEnd, VarKey, VarRef, VarVersions


@dataclass
class Extend:
    """Append ``items`` (flattened leaves) to state ``state``."""

    state: int
    items: list[Expr]

    def __str__(self) -> str:
        return f"s{self.state} += " + " + ".join(repr(i) for i in self.items)


@dataclass
class Fork:
    """Fork state ``state`` into new states ``children``."""

    state: int
    children: list[int]

    def __str__(self) -> str:
        return ", ".join(f"s{c}" for c in self.children) + f" = fork(s{self.state})"


@dataclass
class Join:
    """Join the forks ``children`` back into state ``state`` (``gather_variable`` or
    ``concate_and_append``)."""

    state: int
    children: list[int]
    mode: str

    def __str__(self) -> str:
        kids = ", ".join(f"s{c}" for c in self.children)
        return f"join(s{self.state}, [{kids}], mode={self.mode})"


@dataclass
class SetVar:
    """Set variable ``name`` of state ``state`` to a Python value."""

    state: int
    name: str
    value: Any

    def __str__(self) -> str:
        return f"s{self.state}[{self.name!r}] = {self.value!r}"


@dataclass
class Call:
    """State ``state`` starts empty: the program ``name`` called from the traced one runs in it."""

    state: int
    name: str

    def __str__(self) -> str:
        return f"s{self.state} = {self.name}()"


Statement = Extend | Fork | Join | SetVar | Call


class TraceNode:
    """One node of the trace graph: a leaf, fork, join, variable set or call, with the node before
    it in its state (``prev_node``) and the nodes whose values it reads (``sources``)."""

    def __init__(
        self, node_id: int, label: str, prev_node: TraceNode | None, sources: list[TraceNode]
    ) -> None:
        self.node_id = node_id
        self.label = label
        self.prev_node = prev_node
        self.sources = sources

    def print_graph_dfs(self) -> str:
        """This node and everything it depends on, one line each, dependencies first."""
        lines: list[str] = []
        done: set[int] = set()
        stack: list[tuple[TraceNode, bool]] = [(self, False)]
        while stack:  # NOTE: iterative: a long program's chain would exceed Python's recursion limit
            node, expanded = stack.pop()
            if node.node_id in done:
                continue
            if expanded:
                done.add(node.node_id)
                lines.append(str(node))
                continue
            stack.append((node, True))
            deps = ([node.prev_node] if node.prev_node is not None else []) + node.sources
            stack.extend((dep, False) for dep in reversed(deps) if dep.node_id not in done)
        return "".join(line + "\n" for line in lines)

    def __str__(self) -> str:
        prev = f"%{self.prev_node.node_id} + " if self.prev_node is not None else ""
        return f"%{self.node_id} = {prev}{self.label}"

    def __repr__(self) -> str:
        return f"<TraceNode {self}>"


@dataclass
class ProgramIR:
    """The statements of one traced run plus why it is dynamic, if it is."""

    name: str
    statements: list[Statement] = field(default_factory=list)
    #: Set when the program's control flow reads generated values (it then runs in the interpreter).
    dynamic_reason: str | None = None

    @property
    def is_static(self) -> bool:
        return self.dynamic_reason is None

    def __str__(self) -> str:
        head = f"program {self.name}" + ("" if self.is_static else f"  # dynamic: {self.dynamic_reason}")
        return "\n".join([head] + [f"  {st}" for st in self.statements])

    def bind(self, values: dict[str, Any]) -> ProgramIR:
        """A copy whose argument placeholders named in ``values`` are the text ``str(value)``."""

        def filled(leaf: Expr) -> Expr:
            return (
                Constant(str(values[leaf.name]))
                if isinstance(leaf, Argument) and leaf.name in values
                else leaf
            )

        statements = [
            replace(st, items=[filled(x) for x in st.items]) if isinstance(st, Extend) else st
            for st in self.statements
        ]
        return replace(self, statements=statements)

    def leading_text(self, chat_template: ChatTemplate) -> str:
        """The text the program's own state starts with before its first generation or argument
        placeholder, roles rendered (what ``run_batch`` and ``cache()`` prefill)."""
        text = ""
        turns = Turns(chat_template)
        for st in self.statements:
            if not isinstance(st, Extend) or st.state != 0:
                break
            for leaf in st.items:
                try:
                    if isinstance(leaf, Constant):
                        text += leaf.value
                    elif isinstance(leaf, RoleBegin):
                        text += turns.begin(leaf.role)
                    elif isinstance(leaf, RoleEnd):
                        text += turns.end(leaf.role)
                    else:
                        return text
                except ValueError:  # misnested roles: the program fails when it runs
                    return text
        return text

    @property
    def last_node(self) -> TraceNode | None:
        """The last node of the program's own state (``None`` for an empty program)."""
        return self.trace_graph().get(0)

    def trace_graph(self) -> dict[int, TraceNode]:
        """Each state's last node in the trace graph (see ``TraceNode``)."""
        nodes: list[TraceNode] = []
        last: dict[int, TraceNode] = {}
        producer: dict[VarKey, TraceNode] = {}
        versions = VarVersions()

        def add(state: int, label: str, sources: list[TraceNode] | None = None) -> TraceNode:
            node = TraceNode(len(nodes), label, last.get(state), sources or [])
            nodes.append(node)
            last[state] = node
            return node

        for st in self.statements:
            if isinstance(st, Extend):
                for leaf in st.items:
                    source = [producer[leaf.key]] if isinstance(leaf, VarRef) and leaf.key in producer else []
                    node = add(st.state, repr(leaf), source)
                    if leaf.output_var is not None:
                        producer[versions.next_key(st.state, leaf.output_var)] = node
            elif isinstance(st, Fork):
                fork = add(st.state, f"fork(s{st.state}, size={len(st.children)})")
                for i, child in enumerate(st.children):
                    last[child] = fork
                    add(child, f"fork_item({i})")
            elif isinstance(st, Join):
                add(st.state, f"join({st.mode})", [last[c] for c in st.children if c in last])
            elif isinstance(st, SetVar):
                add(st.state, f"set_var({st.name!r}, {st.value!r})")
            elif isinstance(st, Call):
                add(st.state, f"call({st.name})")
        return last

    def to_dot(self) -> str:
        """Graphviz source: one box per statement, solid edges for state order and forks,
        dashed edges from the generation of a variable to each read of it."""
        lines = [f'digraph "{self.name}" {{', "  node [shape=box, fontname=monospace];"]
        last: dict[int, str] = {}
        producer: dict[VarKey, str] = {}
        versions = VarVersions()
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
                    if leaf.output_var is not None:
                        producer[versions.next_key(st.state, leaf.output_var)] = node
        lines.append("}")
        return "\n".join(lines)


def _dot_quote(text: str) -> str:
    if len(text) > 120:
        text = text[:117] + "..."
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
