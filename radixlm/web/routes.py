"""The playground's routes: ``GET /`` and ``/ui/<file>`` (static), ``GET /ui/api/server`` (the
server view's snapshot) and ``POST /ui/api/program`` (a request graph run, streamed node by node)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from radixlm.program.graph_executor import execute_program_stream
from radixlm.runtime.server.errors import ApiError
from radixlm.runtime.server.program_api import ProgramRequests, read_graph
from radixlm.web.assets import CSP, read_asset

router = APIRouter()
MAX_TREE_NODES = 400  # the server view draws at most this many radix tree nodes
PREVIEW_TOKENS = 12
_NO_CACHE = {"Cache-Control": "no-cache"}
_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"}


@router.get("/")
async def index() -> Response:
    return _asset("index.html")


@router.get("/ui/api/server")
async def server_view(request: Request) -> dict[str, Any]:
    """The scheduler's figures, the running batch and the radix tree (at most ``?max_nodes=``, default
    and cap 400, nodes; ``tree.truncated`` says more exist), each node with a decoded preview of its
    first tokens."""
    raw = request.query_params.get("max_nodes", str(MAX_TREE_NODES))
    max_nodes = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 6 else 0
    if not 1 <= max_nodes <= MAX_TREE_NODES:
        message = f"max_nodes must be an integer in [1, {MAX_TREE_NODES}], got {raw[:20]!r}"
        raise ApiError(message, 400, "max_nodes")
    tm = request.app.state.tokenizer_manager
    stats = await tm.get_stats(tree_nodes=max_nodes)
    for node in stats.get("tree", {}).get("nodes", []):
        node["text"] = tm.tokenizer.decode(node.pop("head")[:PREVIEW_TOKENS])
    stats["time"] = time.time()
    stats["model"] = request.app.state.served_model_name
    return stats


@router.post("/ui/api/program")
async def run_program_live(request: Request) -> StreamingResponse:
    """Body ``{"graph": {...}}`` as ``POST /program``; answers NDJSON: ``{"event": "node", ...}``
    as each gen/select node finishes (``POST /program``'s result entries), then ``{"event": "done"}``
    or ``{"event": "error", "message"}``."""
    graph = await read_graph(request)
    requests = ProgramRequests(request.app.state.tokenizer_manager)

    async def lines() -> AsyncIterator[bytes]:
        try:
            async for event in execute_program_stream(graph, requests.generate):
                yield _line({"event": "node", **event})
            yield _line({"event": "done"})
        except (ValueError, KeyError, TypeError, ApiError) as e:
            yield _line({"event": "error", "message": str(getattr(e, "message", e))})
        finally:
            # NOTE: a client that left cancels this generator's scope, which would cancel any
            # await here too; the pins must still be released.
            with anyio.CancelScope(shield=True):
                await requests.release()

    return StreamingResponse(lines(), media_type="application/x-ndjson", headers=_NO_CACHE)


def _line(event: dict[str, Any]) -> bytes:
    return (json.dumps(event, default=str) + "\n").encode()


# NOTE: registered last: the API paths above must match before this catch-all.
@router.get("/ui/{name:path}")
async def asset(name: str) -> Response:
    if name.startswith("api/"):
        raise ApiError(f"no playground endpoint {name[4:]!r}", 404)
    return _asset(name)


def _asset(name: str) -> Response:
    found = read_asset(name)
    if found is None:
        raise ApiError(f"no playground file {name!r}", 404)
    body, content_type = found
    return Response(body, media_type=content_type, headers=_HEADERS)
