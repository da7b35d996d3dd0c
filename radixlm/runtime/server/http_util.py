"""Small HTTP helpers shared by the native and OpenAI routes: JSON bodies, SSE, disconnects."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from fastapi import Request

from radixlm.runtime.requests.json_bounds import InvalidJson, load_bounded_json, top_field
from radixlm.runtime.server.errors import ApiError
from radixlm.runtime.server.offload import body_cost, maybe_off_loop

logger = logging.getLogger(__name__)

T = TypeVar("T")
DISCONNECT_POLL_S = 0.5


class ClientDisconnected(Exception):
    """The client closed the connection before its response was ready (answered 499, logged once)."""


def log_client_left(path: str, streaming: bool = False) -> None:
    """The one log line of a client that left: routine for a server, so INFO, no traceback."""
    what = "its stream" if streaming else "its response"
    logger.info("client closed the connection to %s before %s finished; its request is aborted", path, what)


async def read_json(request: Request) -> Any:
    """The request body as JSON (``read_json_sized``)."""
    return (await read_json_sized(request))[0]


async def read_json_sized(request: Request) -> tuple[Any, int]:
    """The request body as JSON and its size in bytes; 400 naming the field when it is not valid JSON,
    holds non-finite numbers or lone surrogates, or nests deeper than ``--max-json-depth``
    (``json_bounds``). A number such as ``3.0`` is the integer 3, as JSON schema (and so the OpenAPI
    document) counts it."""
    raw = await request.body()
    depth = request.app.state.server_args.max_json_depth
    try:
        # NOTE: parsing JSON costs about a sixteenth of tokenizing as much text
        body = await maybe_off_loop(len(raw) // 16, load_bounded_json, raw or b"null", depth, True)
    except InvalidJson as e:
        where = f" at {e.path}" if e.path else ""
        raise ApiError(f"invalid request body{where}: {e}", param=top_field(e.path) or None) from e
    return body, len(raw)


def sse(obj: Any) -> str:
    """One server-sent event carrying ``obj`` as JSON."""
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


SSE_DONE = "data: [DONE]\n\n"


async def until_done_or_disconnect(awaitable: Awaitable[T], request: Request) -> T:
    """Await ``awaitable``, checking meanwhile whether the client left (then raise ``ClientDisconnected``)."""
    task = asyncio.ensure_future(awaitable)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if done:
                return task.result()
            if await request.is_disconnected():
                log_client_left(request.url.path)
                raise ClientDisconnected()
    finally:
        if not task.done():
            task.cancel()


async def read_body_costed(request: Request, parse: Callable[[Any], T]) -> tuple[T, int]:
    """The body read as JSON and given to ``parse`` (a model's validation), off the loop when its
    ``body_cost`` is large; returns the parsed body and that cost, for the planning that follows."""
    body, size = await read_json_sized(request)
    cost = body_cost(body, size)
    return await maybe_off_loop(cost, parse, body), cost
