"""The graph path's two ends: send a compiled request graph to the backend, and rebuild the
program's state (text, messages, variables, forks, called programs) from the graph's results by
replaying the traced statements in the interpreter without calling the backend."""

from __future__ import annotations

from typing import Any

from radixlm.frontend.backends.base import Backend
from radixlm.frontend.errors import ProgramError
from radixlm.frontend.interpreter import Replay, RunContext, StreamExecutor
from radixlm.frontend.ir import ExprList
from radixlm.frontend.program_ir import Call, Extend, Fork, Join, ProgramIR, SetVar
from radixlm.frontend.state import ProgramState


def replay_table(graph: dict[str, Any], result: dict[str, Any]) -> Replay:
    """The replay table of an executed request graph: the results of its gen and select nodes by
    state and op index, which the interpreter replays to rebuild the ``ProgramState`` (text,
    messages, forks) locally."""
    by_id = {r["node"]: r for r in result["results"]}
    table: Replay = {}
    for node in graph["nodes"]:
        if "op_index" in node:
            r = by_id[node["id"]]
            table[(node["state"], node["op_index"])] = (r["value"], r.get("meta_info", {}))
    return table


def replay(
    ir: ProgramIR, graph: dict[str, Any], result: dict[str, Any], backend: Backend, defaults: dict[str, Any]
) -> ProgramState:
    """The program's state rebuilt from a graph's results (``ir`` with its arguments bound)."""
    ctx = RunContext(backend, defaults, backend.chat_template, replay=replay_table(graph, result))
    root = ProgramState(StreamExecutor(ctx, use_thread=False))
    # NOTE: executors are created in the tracer's state order, so their ids are the IR's state ids.
    states: dict[int, StreamExecutor] = {0: root.executor}
    for st in ir.statements:
        if isinstance(st, Extend):
            states[st.state].submit(ExprList(st.items))
        elif isinstance(st, Fork):
            for child_id, child in zip(st.children, states[st.state].fork(len(st.children))):
                states[child_id] = child
        elif isinstance(st, Join):
            states[st.state].join([states[c] for c in st.children], st.mode)
        elif isinstance(st, SetVar):
            states[st.state].set_var(st.name, st.value)
        elif isinstance(st, Call):
            states[st.state] = StreamExecutor(ctx, use_thread=False)
    ctx.end_all()
    root.execution_path = "graph"
    return root


def run_graph(backend: Backend, graph: dict[str, Any]) -> dict[str, Any] | None:
    """The backend's result for ``graph`` (``None``: it runs no graphs); failures as ``ProgramError``.
    A graph without nodes (a program that only appends text) needs no request."""
    if not graph["nodes"]:
        return {"results": []}
    try:
        return backend.run_graph(graph)
    except Exception as exc:
        raise ProgramError.wrapping(exc) from exc


async def arun_graph(backend: Backend, graph: dict[str, Any]) -> dict[str, Any] | None:
    """``run_graph`` on asyncio."""
    if not graph["nodes"]:
        return {"results": []}
    try:
        return await backend.arun_graph(graph)
    except Exception as exc:
        raise ProgramError.wrapping(exc) from exc
