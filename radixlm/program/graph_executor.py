"""Executes a compiled request graph next to the runtime (``POST /program`` and the in-process Engine).

The language's compiler (in the frontend) writes these graphs.

Request graph format (JSON, version 1)::

    {"version": 1, "name": "<program name>",
     "nodes": [
       {"id": 0,                    # nodes are listed parents-first; ids are list indices
        "state": 0,                 # which program state (0: the program's own, then forks in order)
        "parent": null,             # the node whose context this one continues (null: empty context)
        "extend": [                 # appended to the parent's context, in order
          {"text": "Q: What is 2+2?\\nA:"},
          {"var": "answer", "node": 3},         # the value node 3 generated, as text
          {"ids": [791, 4320]},                 # token ids
          {"arg": "question"}                   # a placeholder: bind_arguments() makes it text
        ],
        "op": null                  # nothing to run: the context is only extended
            | {"type": "prefill"}   # prefill the context (max_new_tokens 0) so forks share its KV
            | {"type": "gen", "name": "answer", "options": {"max_new_tokens": 16, "stop": ["\\n"], ...}}
            | {"type": "select", "name": "c", "choices": ["yes", "no"], "method": "token_length_normalized"},
        "op_index": 0}              # the op's position in its state (gen/select only)
     ],
     "arguments": ["question"]}     # only when the graph has placeholders

A node's context is its parent's context, then its ``extend`` segments (a ``{"ids": [...]}``
segment appends token ids), then what its op produced: a gen's output token ids, a select's choice
text (the rules are ``radixlm.program.context``'s, shared with the interpreter). Contexts travel to
the runtime as ``input_segments``. ``options`` are /generate sampling parameters plus
``return_logprob``, ``logprob_start_len``, ``top_logprobs_num``, ``return_text_in_logprobs``. Nodes
whose parents and variable sources are done run concurrently, so sibling forks batch together in
the scheduler.

Radix path locking: a node that runs a request and has ``k`` child nodes running requests that
continue its context sends its first request with a fresh ``rid`` and ``pin_children=k``; the
scheduler keeps that request's context locked in the radix tree when it finishes. Each child sends
its first request with ``unpin_rids=[that rid]``, releasing one unit once it is admitted (it then
holds its own lock on the shared prefix). Nodes with no op run no request: their children count for
(and unpin) the nearest ancestor that runs one. A select's first request is the prefill of its
context, so that is what its children keep locked. A gen with ``n > 1`` pins nothing (its children
continue the context before it). Pins of a failed program expire in the scheduler.

Result::

    {"results": [{"node": 3, "name": "answer", "value": " 4", "meta_info": {...}}, ...]}

``gen`` and ``select`` run exactly the request protocols of the interpreter
(``radixlm.program.protocols``), so under greedy decoding both paths give identical variables.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from radixlm.program.context import Context, append_ids, append_text, extend
from radixlm.program.graph_check import GRAPH_VERSION as GRAPH_VERSION  # the compiler reads it here
from radixlm.program.graph_check import check_graph
from radixlm.program.protocols import adrive, gen_protocol, select_protocol

Generate = Callable[[dict[str, Any]], Awaitable[Any]]

MAX_GRAPH_NODES = 1 << 16  # the server applies its own, lower --max-program-nodes first


async def execute_program(graph: dict[str, Any], generate: Generate) -> dict[str, Any]:
    """Run every node of ``graph``; return ``{"results": [...]}``. The first failing node's
    exception propagates (the other nodes are cancelled)."""
    results = [event async for event in execute_program_stream(graph, generate)]
    return {"results": results}


async def execute_program_stream(graph: dict[str, Any], generate: Generate) -> AsyncIterator[dict[str, Any]]:
    """Like ``execute_program`` but yields each result event as its node finishes."""
    check_graph(graph, MAX_GRAPH_NODES)
    nodes = graph["nodes"]
    pins = plan_pins(nodes, uuid.uuid4().hex)
    contexts: dict[int, asyncio.Future] = {}
    values: dict[int, asyncio.Future] = {}
    loop = asyncio.get_running_loop()
    for node in nodes:
        contexts[node["id"]] = loop.create_future()
        values[node["id"]] = loop.create_future()
    events: asyncio.Queue = asyncio.Queue()

    async def run_node(node: dict[str, Any]) -> None:
        try:
            context: Context = list(await contexts[node["parent"]]) if node["parent"] is not None else []
            for seg in node["extend"]:
                if "text" in seg:
                    append_text(context, seg["text"])
                elif "ids" in seg:
                    append_ids(context, seg["ids"])
                else:
                    append_text(context, _as_text(await values[seg["node"]]))
            op = node["op"]
            value: Any = None
            if op is not None:
                send = _first_request_with(generate, pins.get(node["id"], {}))
                if op["type"] == "prefill":
                    await send({"input_segments": list(context), "sampling_params": {"max_new_tokens": 0}})
                else:
                    if op["type"] == "gen":
                        outcome = await adrive(gen_protocol(context, op["options"]), send)
                    elif op["type"] == "select":
                        outcome = await adrive(select_protocol(context, op["choices"], op["method"]), send)
                    else:
                        raise ValueError(f"unknown op type {op['type']!r}")
                    value = outcome.value
                    extend(context, outcome.continuation)
                    events.put_nowait(
                        {
                            "node": node["id"],
                            "name": op.get("name"),
                            "value": value,
                            "meta_info": outcome.meta_info,
                        }
                    )
            values[node["id"]].set_result(value)
            contexts[node["id"]].set_result(context)
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


def bind_arguments(graph: dict[str, Any], **values: Any) -> dict[str, Any]:
    """A copy of ``graph`` with each ``{"arg": name}`` placeholder replaced by ``str(value)`` text.

    Raises ``ValueError`` naming placeholders without a value and values for no placeholder."""
    names = list(graph.get("arguments", []))
    missing = [n for n in names if n not in values]
    extra = sorted(set(values) - set(names))
    if missing or extra:
        raise ValueError(
            f"bind_arguments: missing {missing or 'none'}, unknown {extra or 'none'} "
            f"(the graph's arguments are {names})"
        )

    def filled(segments: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for seg in segments:  # text merges as the compiler writes it, so bound == compiled with values
            if "arg" in seg or "text" in seg:
                append_text(out, str(values[seg["arg"]]) if "arg" in seg else seg["text"])
            else:
                out.append(seg)
        return out

    nodes = [{**node, "extend": filled(node["extend"])} for node in graph["nodes"]]
    bound = {**graph, "nodes": nodes}
    bound.pop("arguments", None)
    return bound


def plan_pins(nodes: list[dict[str, Any]], run_id: str) -> dict[int, dict[str, Any]]:
    """Node id -> the fields its first request carries: ``rid`` and ``pin_children`` for a node
    whose context children continue, ``unpin_rids`` for those children (see the module doc)."""
    by_id = {n["id"]: n for n in nodes}
    children: dict[int, list[int]] = defaultdict(list)
    for node in nodes:
        if node["op"] is None:
            continue
        anchor = _request_ancestor(node, by_id)
        if anchor is not None and _pins_its_context(by_id[anchor]["op"]):
            children[anchor].append(node["id"])
    fields: dict[int, dict[str, Any]] = defaultdict(dict)
    for parent, kids in children.items():
        rid = f"program-{run_id}-{parent}"
        fields[parent].update(rid=rid, pin_children=len(kids))
        for kid in kids:
            fields[kid]["unpin_rids"] = [rid]
    return dict(fields)


def _request_ancestor(node: dict[str, Any], by_id: dict[int, dict[str, Any]]) -> int | None:
    """The nearest ancestor that runs a request (nodes without an op are passed through)."""
    parent = node["parent"]
    while parent is not None and by_id[parent]["op"] is None:
        parent = by_id[parent]["parent"]
    return parent


def _pins_its_context(op: dict[str, Any]) -> bool:
    # NOTE: n > 1 samples are n requests (rids "{rid}-{i}"): nothing one child could unpin.
    return not (op["type"] == "gen" and op.get("options", {}).get("n", 1) > 1)


def _first_request_with(generate: Generate, fields: dict[str, Any]) -> Generate:
    """``generate`` that adds ``fields`` to the first request only (a node's pins and unpins)."""
    pending = dict(fields)

    async def send(req: dict[str, Any]) -> Any:
        nonlocal pending
        extra, pending = pending, {}
        return await generate({**req, **extra})

    return send


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)
