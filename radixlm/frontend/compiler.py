"""The compiler: a static program's IR -> a request graph the runtime executes whole.

The graph format is documented in ``radixlm.runtime.program_executor``. Role markers are rendered
here with the backend's chat template, and run-level sampling defaults are merged into each op, so
a graph is self-contained, JSON-serializable data.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from radixlm.frontend.chat_template import ChatTemplate
from radixlm.frontend.choices import method_name
from radixlm.frontend.errors import DynamicProgramError
from radixlm.frontend.ir import Argument, Constant, Gen, Image, RoleBegin, RoleEnd, Select, VarRef
from radixlm.frontend.ops import sampling_options
from radixlm.frontend.program_ir import Extend, Fork, Join, ProgramIR, SetVar

GRAPH_VERSION = 1


@dataclass
class _Cursor:
    """Where one state's next node attaches and what text is pending before it."""

    parent: Optional[int] = None
    segments: list[dict[str, Any]] = field(default_factory=list)
    role: Optional[str] = None
    roles_seen: bool = False
    op_index: int = 0
    versions: dict[str, int] = field(default_factory=dict)

    def copy(self) -> "_Cursor":
        return _Cursor(self.parent, list(self.segments), self.role, self.roles_seen)


def compile_program(ir: ProgramIR, chat_template: ChatTemplate, defaults: dict[str, Any]) -> dict[str, Any]:
    """Turn a static program's IR into a request graph. Raises ``DynamicProgramError`` for what
    only the interpreter runs (dynamic control flow, images, ``concate_and_append`` joins)."""
    if not ir.is_static:
        raise DynamicProgramError(ir.dynamic_reason or "dynamic program")
    nodes: list[dict[str, Any]] = []
    producers: dict[str, int] = {}
    cursors: dict[int, _Cursor] = {0: _Cursor()}

    def add_node(state: int, op: Optional[dict[str, Any]]) -> int:
        cur = cursors[state]
        node = {"id": len(nodes), "state": state, "parent": cur.parent, "extend": _merge(cur.segments), "op": op}
        if op is not None and op["type"] != "prefill":
            node["op_index"] = cur.op_index
            cur.op_index += 1
        nodes.append(node)
        cur.parent, cur.segments = node["id"], []
        return node["id"]

    for st in ir.statements:
        if isinstance(st, Extend):
            cur = cursors[st.state]
            for leaf in st.items:
                if isinstance(leaf, Constant):
                    cur.segments.append({"text": leaf.value})
                elif isinstance(leaf, VarRef):
                    if leaf.key not in producers:
                        raise DynamicProgramError(f"variable {leaf.key} is read before it is generated")
                    cur.segments.append({"var": leaf.key.split(".", 1)[1].rsplit(".", 1)[0], "node": producers[leaf.key]})
                elif isinstance(leaf, RoleBegin):
                    cur.segments.append({"text": chat_template.begin_text(leaf.role, first_turn=not cur.roles_seen)})
                    cur.roles_seen, cur.role = True, leaf.role
                elif isinstance(leaf, RoleEnd):
                    cur.segments.append({"text": chat_template.suffix(leaf.role)})
                    cur.role = None
                elif isinstance(leaf, Gen):
                    op = {"type": "gen", "name": leaf.name, "options": sampling_options(defaults, leaf.params)}
                    _register(producers, cur, st.state, leaf.name, add_node(st.state, op))
                elif isinstance(leaf, Select):
                    op = {"type": "select", "name": leaf.name, "choices": list(leaf.choices),
                          "method": method_name(leaf.method)}
                    _register(producers, cur, st.state, leaf.name, add_node(st.state, op))
                elif isinstance(leaf, Image):
                    raise DynamicProgramError("image inputs run in the interpreter")
                elif isinstance(leaf, Argument):
                    raise ValueError(f"argument {leaf.name!r} is a placeholder; give it a value to compile")
                else:
                    raise TypeError(f"cannot compile {leaf!r}")
        elif isinstance(st, Fork):
            if cursors[st.state].segments or cursors[st.state].parent is not None:
                add_node(st.state, {"type": "prefill"})
            for child in st.children:
                cursors[child] = cursors[st.state].copy()
        elif isinstance(st, Join):
            if st.mode != "gather_variable":
                raise DynamicProgramError(f"join mode {st.mode} runs in the interpreter")
        elif isinstance(st, SetVar):
            continue
    return {"version": GRAPH_VERSION, "name": ir.name, "nodes": nodes}


def _register(producers: dict[str, int], cur: _Cursor, state: int, name: Optional[str], node_id: int) -> None:
    if name is None:
        return
    version = cur.versions.get(name, 0)
    cur.versions[name] = version + 1
    producers[f"{state}.{name}.{version}"] = node_id


def _merge(segments: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Join adjacent text segments."""
    out: list[dict[str, Any]] = []
    for seg in segments:
        if "text" in seg and out and "text" in out[-1]:
            out[-1] = {"text": out[-1]["text"] + seg["text"]}
        elif seg.get("text") != "":
            out.append(seg)
    return out


def replay_table(graph: dict[str, Any], result: dict[str, Any]) -> dict[tuple[int, int], tuple[Any, dict[str, Any]]]:
    """``(state id, op index) -> (value, meta_info)`` from an executed graph, for the interpreter's
    replay that rebuilds the ``ProgramState`` (text, messages, forks) locally."""
    by_id = {r["node"]: r for r in result["results"]}
    table = {}
    for node in graph["nodes"]:
        if "op_index" in node:
            r = by_id[node["id"]]
            table[(node["state"], node["op_index"])] = (r["value"], r.get("meta_info", {}))
    return table
