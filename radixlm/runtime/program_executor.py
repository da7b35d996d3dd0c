"""Executes a compiled request graph next to the runtime (``POST /program`` and the in-process Engine).

Request graph format (JSON, version 1)::

    {"version": 1, "name": "<program name>",
     "nodes": [
       {"id": 0,                    # nodes are listed parents-first; ids are list indices
        "state": 0,                 # which program state (0: the program's own, then forks in order)
        "parent": null,             # the node whose context this one continues (null: empty context)
        "extend": [                 # appended to the parent's context, in order
          {"text": "Q: What is 2+2?\\nA:"},
          {"var": "answer", "node": 3}          # the value node 3 generated
        ],
        "op": null                  # nothing to run: the context is only extended
            | {"type": "prefill"}   # prefill the context (max_new_tokens 0) so forks share its KV
            | {"type": "gen", "name": "answer", "options": {"max_new_tokens": 16, "stop": ["\\n"], ...}}
            | {"type": "select", "name": "c", "choices": ["yes", "no"], "method": "token_length_normalized"},
        "op_index": 0}              # the op's position in its state (gen/select only)
     ]}

A node's context is its parent's context, then its ``extend`` segments, then (for gen/select) the
value it produced. ``options`` are /generate sampling parameters plus ``return_logprob``,
``logprob_start_len``, ``top_logprobs_num``, ``return_text_in_logprobs``. Nodes whose parents and
variable sources are done run concurrently, so sibling forks batch together in the scheduler.

Result::

    {"results": [{"node": 3, "name": "answer", "value": " 4", "meta_info": {...}}, ...]}

``gen`` and ``select`` run exactly the request protocols of the interpreter
(``radixlm.frontend.ops``), so under greedy decoding both paths give identical variables.
"""
from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Awaitable, Callable

from radixlm.frontend.ops import adrive, gen_protocol, select_protocol

Generate = Callable[[dict[str, Any]], Awaitable[Any]]


async def execute_program(graph: dict[str, Any], generate: Generate) -> dict[str, Any]:
    """Run every node of ``graph``; return ``{"results": [...]}``. The first failing node's
    exception propagates (the other nodes are cancelled)."""
    results = [event async for event in execute_program_stream(graph, generate)]
    return {"results": results}


async def execute_program_stream(graph: dict[str, Any], generate: Generate) -> AsyncIterator[dict[str, Any]]:
    """Like ``execute_program`` but yields each result event as its node finishes."""
    nodes = graph.get("nodes")
    if graph.get("version") != 1 or not isinstance(nodes, list):
        raise ValueError("not a version 1 request graph")
    contexts: dict[int, asyncio.Future] = {}
    values: dict[int, asyncio.Future] = {}
    loop = asyncio.get_running_loop()
    for node in nodes:
        contexts[node["id"]] = loop.create_future()
        values[node["id"]] = loop.create_future()
    events: asyncio.Queue = asyncio.Queue()

    async def run_node(node: dict[str, Any]) -> None:
        try:
            text = await contexts[node["parent"]] if node["parent"] is not None else ""
            for seg in node["extend"]:
                text += seg["text"] if "text" in seg else _as_text(await values[seg["node"]])
            op = node["op"]
            value: Any = None
            if op is None:
                pass
            elif op["type"] == "prefill":
                await generate({"text": text, "sampling_params": {"max_new_tokens": 0}})
            else:
                if op["type"] == "gen":
                    value, meta = await adrive(gen_protocol(text, op["options"]), generate)
                elif op["type"] == "select":
                    value, meta = await adrive(select_protocol(text, op["choices"], op["method"]), generate)
                else:
                    raise ValueError(f"unknown op type {op['type']!r}")
                if isinstance(value, str):
                    text += value
                events.put_nowait({"node": node["id"], "name": op.get("name"), "value": value, "meta_info": meta})
            values[node["id"]].set_result(value)
            contexts[node["id"]].set_result(text)
        except BaseException as exc:
            for fut in (values[node["id"]], contexts[node["id"]]):
                if not fut.done():
                    fut.set_exception(exc)
            raise

    tasks = [asyncio.create_task(run_node(n)) for n in nodes]
    pending = set(tasks)
    try:
        while pending:
            getter = asyncio.ensure_future(events.get())
            done, _ = await asyncio.wait(pending | {getter}, return_when=asyncio.FIRST_COMPLETED)
            if getter in done:
                yield getter.result()
            else:
                getter.cancel()
            for task in done - {getter}:
                pending.discard(task)
                task.result()  # re-raises the node's failure
        while not events.empty():
            yield events.get_nowait()
    finally:
        for task in tasks:
            task.cancel()
        for fut in [*contexts.values(), *values.values()]:
            if fut.done() and not fut.cancelled():
                fut.exception()  # mark retrieved: dependents failed with the same error


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)
