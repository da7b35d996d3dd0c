"""``POST /program``: run a compiled request graph next to the KV cache (no round trip per call)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from fastapi import APIRouter, Request, Response

from radixlm.program.graph_check import InvalidGraph, check_graph
from radixlm.program.graph_executor import execute_program
from radixlm.runtime.messages import CLIENT_ABORT_STATUS
from radixlm.runtime.server.errors import ApiError
from radixlm.runtime.server.http_util import ClientDisconnected, read_json, until_done_or_disconnect
from radixlm.runtime.server.native_api import group_result
from radixlm.runtime.server.native_protocol import parse_generate
from radixlm.runtime.server.tokenizer_manager import TokenizerManager

router = APIRouter()


async def read_graph(request: Request) -> dict[str, Any]:
    """The checked request graph of a ``{"graph": {...}}`` body; an ``ApiError`` (400) otherwise."""
    body = await read_json(request)
    graph = body.get("graph") if isinstance(body, dict) else None
    if not isinstance(graph, dict):
        raise ApiError('the body must be {"graph": {...}} with a compiled request graph', 400, "graph")
    try:
        check_graph(graph, request.app.state.server_args.max_program_nodes)
    except InvalidGraph as e:
        raise ApiError(f"invalid request graph: {e}", 400, "graph") from e
    return graph


@router.post("/program")
async def run_program(request: Request) -> Any:
    """Body ``{"graph": <request graph, see radixlm.program.graph_executor>}``; answers
    ``{"results": [...]}``. Every node's generation goes straight to the scheduler. A client that
    leaves aborts every node's request; a failed program releases the pins its nodes still hold."""
    tm: TokenizerManager = request.app.state.tokenizer_manager
    graph = await read_graph(request)
    requests = ProgramRequests(tm)
    try:
        return await until_done_or_disconnect(execute_program(graph, requests.generate), request)
    except ClientDisconnected:
        return Response(status_code=CLIENT_ABORT_STATUS)
    except (ValueError, KeyError, TypeError) as e:
        raise ApiError(f"invalid request graph: {e}", 400, "graph") from e
    finally:
        await requests.release()


class ProgramRequests:
    """The requests of one program run: ``generate`` sends a node's request straight to the
    scheduler; ``release`` (always, at the end) frees the pins its nodes still hold."""

    def __init__(self, tm: TokenizerManager) -> None:
        self.tm = tm
        self.held: Counter[str] = Counter()  # pinned rid -> children not yet submitted

    async def generate(self, req_body: dict[str, Any]) -> Any:
        req = parse_generate(req_body, pins_allowed=True)
        # NOTE: once submitted, a child releases its unit itself (admitted, rejected or aborted).
        self.held.subtract(req_body.get("unpin_rids") or [])
        group = await self.tm.submit(req.items, False, req.return_text_in_logprobs)
        try:
            await group.wait()
        except BaseException:
            await self.tm.abort(group)
            raise
        if req_body.get("pin_children"):
            self.held[req_body["rid"]] += req_body["pin_children"]
        return group_result(group, req.is_batch)

    async def release(self) -> None:
        await self.tm.release_pins({rid: count for rid, count in self.held.items() if count > 0})
