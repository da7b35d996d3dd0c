"""The compiler: a static program's IR -> a request graph the runtime executes whole.

The graph format is documented in ``radixlm.program.graph_executor``. Role markers are rendered
here with the backend's chat template, and run-level sampling defaults are merged into each op, so
a graph is self-contained, JSON-serializable data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from radixlm.frontend.chat_template import ChatTemplate, Turns
from radixlm.frontend.errors import DynamicProgramError
from radixlm.frontend.ir import (
    Argument,
    Constant,
    Gen,
    Image,
    RoleBegin,
    RoleEnd,
    Select,
    SeparateReasoning,
    VarKey,
    VarRef,
    VarScopeBegin,
    VarScopeEnd,
    VarVersions,
)
from radixlm.frontend.program_ir import Call, Extend, Fork, Join, ProgramIR, SetVar
from radixlm.program.choices import method_name
from radixlm.program.context import Context, append_text
from radixlm.program.graph_executor import GRAPH_VERSION
from radixlm.program.sampling import sampling_options


@dataclass
class _Cursor:
    """Where one state's next node attaches and what is pending before it (text segments, merged,
    and ``{"var", "node"}`` reads)."""

    turns: Turns
    parent: int | None = None
    segments: Context = field(default_factory=list)
    op_index: int = 0

    def fork(self) -> _Cursor:
        """A fork's cursor: the same position and pending text; its own op count."""
        return _Cursor(self.turns.copy(), self.parent, list(self.segments))


def compile_program(ir: ProgramIR, chat_template: ChatTemplate, defaults: dict[str, Any]) -> dict[str, Any]:
    """Turn a static program's IR into a request graph. Raises ``DynamicProgramError`` for what
    only the interpreter runs (dynamic control flow, images, ``concate_and_append`` joins)."""
    if not ir.is_static:
        raise DynamicProgramError(ir.dynamic_reason or "dynamic program")
    nodes: list[dict[str, Any]] = []
    producers: dict[VarKey, int] = {}
    scoped: set[VarKey] = set()  # var_scope variables: made from the text, not by one node
    versions = VarVersions()
    cursors: dict[int, _Cursor] = {0: _Cursor(Turns(chat_template))}
    arguments: dict[str, None] = {}  # placeholders, in order of first use

    def add_node(state: int, op: dict[str, Any] | None) -> int:
        cur = cursors[state]
        node_id = len(nodes)
        node = {"id": node_id, "state": state, "parent": cur.parent, "extend": cur.segments, "op": op}
        if op is not None and op["type"] != "prefill":
            node["op_index"] = cur.op_index
            cur.op_index += 1
        nodes.append(node)
        cur.parent, cur.segments = node_id, []
        return node_id

    for st in ir.statements:
        if isinstance(st, Extend):
            cur = cursors[st.state]
            for leaf in st.items:
                if isinstance(leaf, Constant):
                    append_text(cur.segments, leaf.value)
                elif isinstance(leaf, VarRef):
                    if leaf.key in scoped:
                        raise DynamicProgramError(
                            f"reading var_scope variable {leaf.key.name!r} runs in the interpreter"
                        )
                    if leaf.key not in producers:
                        raise DynamicProgramError(f"variable {leaf.key} is read before it is generated")
                    cur.segments.append({"var": leaf.key.name, "node": producers[leaf.key]})
                elif isinstance(leaf, (RoleBegin, RoleEnd)):
                    append_text(cur.segments, _role_text(cur.turns, leaf))
                elif isinstance(leaf, (Gen, Select)):
                    node_id = add_node(st.state, _op(leaf, defaults))
                    if leaf.output_var is not None:
                        producers[versions.next_key(st.state, leaf.output_var)] = node_id
                elif isinstance(leaf, VarScopeEnd):  # the replay computes the variable from the text
                    scoped.add(versions.next_key(st.state, leaf.name))
                elif isinstance(leaf, VarScopeBegin):
                    continue
                elif isinstance(leaf, Image):
                    raise DynamicProgramError("image inputs run in the interpreter")
                elif isinstance(leaf, Argument):  # filled by ``bind_arguments`` before the graph runs
                    cur.segments.append({"arg": leaf.name})
                    arguments.setdefault(leaf.name)
                elif isinstance(leaf, SeparateReasoning):
                    raise DynamicProgramError("separate_reasoning runs in the interpreter")
                else:
                    raise TypeError(f"cannot compile {leaf!r}")
        elif isinstance(st, Fork):
            if cursors[st.state].segments or cursors[st.state].parent is not None:
                add_node(st.state, {"type": "prefill"})
            for child in st.children:
                cursors[child] = cursors[st.state].fork()
        elif isinstance(st, Join):
            if st.mode != "gather_variable":
                raise DynamicProgramError(f"join mode {st.mode} runs in the interpreter")
        elif isinstance(st, Call):
            cursors[st.state] = _Cursor(Turns(chat_template))
        elif isinstance(st, SetVar):
            continue
    graph = {"version": GRAPH_VERSION, "name": ir.name, "nodes": nodes}
    if arguments:
        graph["arguments"] = list(arguments)
    return graph


def _role_text(turns: Turns, leaf: RoleBegin | RoleEnd) -> str:
    """A role marker's text. Misnested roles fail in the interpreter, which reports them."""
    try:
        return turns.begin(leaf.role) if isinstance(leaf, RoleBegin) else turns.end(leaf.role)
    except ValueError as exc:
        raise DynamicProgramError(f"{exc} (runs in the interpreter)") from exc


def _op(leaf: Gen | Select, defaults: dict[str, Any]) -> dict[str, Any]:
    if isinstance(leaf, Gen):
        return {"type": "gen", "name": leaf.name, "options": sampling_options(defaults, leaf.params)}
    return {
        "type": "select",
        "name": leaf.name,
        "choices": list(leaf.choices),
        "method": method_name(leaf.method),
    }
