"""The native, SGLang-compatible HTTP API (what ``sgl.RuntimeEndpoint`` calls)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from radixlm.runtime.messages import CLIENT_ABORT_STATUS
from radixlm.runtime.requests.server_info import build_server_info
from radixlm.runtime.server.errors import ApiError
from radixlm.runtime.server.health import unhealthy_reason
from radixlm.runtime.server.http_util import (
    SSE_DONE,
    ClientDisconnected,
    log_client_left,
    read_json,
    read_json_sized,
    sse,
    until_done_or_disconnect,
)
from radixlm.runtime.server.native_protocol import PROMPT_FIELDS, parse_generate
from radixlm.runtime.server.offload import body_cost, maybe_off_loop
from radixlm.runtime.server.req_state import ReqGroup
from radixlm.runtime.server.session_api import submit_session_turn
from radixlm.runtime.server.tokenizer_manager import TokenizerManager

router = APIRouter()


def _tm(request: Request) -> TokenizerManager:
    return request.app.state.tokenizer_manager


@router.get("/health")
@router.post("/health")
async def health(request: Request) -> Response:
    """200 while the model is loaded, every process is alive, the scheduler loop turns and the server
    is not draining (the port opens only after loading); else 503 saying why."""
    problem = unhealthy_reason(_tm(request), request.app.state.server_args)
    if problem is None:
        return Response(status_code=200)
    return JSONResponse({"error": {"message": problem}}, 503)


@router.get("/get_model_info")
async def get_model_info(request: Request) -> dict[str, Any]:
    tm = _tm(request)
    info = tm.model_info
    return {**info, "is_generation": True, "chat_template": tm.chat_template or info.get("chat_template")}


@router.get("/get_server_info")
@router.get("/server_info")
async def get_server_info(request: Request) -> dict[str, Any]:
    tm = _tm(request)
    stats = await tm.get_stats()
    stats = {**stats, "num_pending_requests": tm.num_pending}
    return build_server_info(
        request.app.state.server_args.to_dict(), tm.model_info, stats, request.app.state.version
    )


@router.post("/flush_cache")
async def flush_cache(request: Request) -> Response:
    """Drop the prefix cache; ``?empty_cache=true`` also empties the device allocator's cache."""
    empty = request.query_params.get("empty_cache", "false").lower() in ("1", "true", "yes")
    out = await _tm(request).flush_cache(empty_cache=empty)
    if not out.success:
        raise ApiError(out.message or "cannot flush the cache while requests are running")
    return Response("Cache flushed.\n", status_code=200)


@router.post("/abort_request")
async def abort_request(request: Request) -> dict[str, Any]:
    body = await read_json(request)
    if not isinstance(body, dict):
        raise ApiError("the request body must be a JSON object")
    tm = _tm(request)
    abort_all, rid = body.get("abort_all", False), body.get("rid")
    if not isinstance(abort_all, bool):
        raise ApiError("abort_all must be true or false", param="abort_all")
    if (rid is not None or not abort_all) and (not isinstance(rid, str) or not rid):
        raise ApiError("rid must be a non-empty string", param="rid")
    if abort_all:
        await tm.abort_all()
        return {"success": True}
    return {"success": await tm.abort_rid(rid)}


@router.post("/concate_and_append_request")
async def concate_and_append_request(request: Request) -> dict[str, Any]:
    """Accepted as a no-op: the SGLang client appends the forks' text itself."""
    await read_json(request)
    return {"success": True}


@router.post("/generate")
async def generate(request: Request) -> Any:
    tm = _tm(request)
    body, size = await read_json_sized(request)
    tm.admission.check_batch_before_parsing(body, PROMPT_FIELDS)
    req = await maybe_off_loop(body_cost(body, size), parse_generate, body)
    if req.session_params is not None:
        group = await submit_session_turn(request.app.state.sessions, req)
    else:
        group = await tm.submit(req.items, req.stream, req.return_text_in_logprobs)
    try:
        if req.stream:
            await until_done_or_disconnect(group.changed.wait(), request)  # a rejection answers 400
            _raise_rejection(group)
            return StreamingResponse(_stream(tm, group, request.url.path), media_type="text/event-stream")
        await until_done_or_disconnect(group.wait(), request)
    except ClientDisconnected:
        await tm.abort(group)
        return Response(status_code=CLIENT_ABORT_STATUS)
    except BaseException:
        await tm.abort(group)
        raise
    return group_result(group, req.is_batch)


def group_result(group: ReqGroup, is_batch: bool) -> Any:
    """The response body of a finished group: one result, or a list for a batch or ``n > 1``."""
    error = group.first_error()
    if error is not None:
        raise error
    outs = [s.snapshot() for s in group.samples]
    return outs if is_batch or len(outs) > 1 else outs[0]


def _raise_rejection(group: ReqGroup) -> None:
    """Answer with an error status when a sample was rejected before producing anything."""
    error = group.first_error()
    if error is not None:
        raise error


async def _stream(tm: TokenizerManager, group: ReqGroup, path: str) -> AsyncIterator[str]:
    """SSE with the cumulative text of each sample; ``index`` tells samples apart."""
    multi = len(group.samples) > 1
    try:
        async for sample in group.updates():
            if sample.error is not None:
                yield sse(sample.error.body())
                continue
            out = sample.snapshot()
            if multi:
                out["index"] = sample.index
            yield sse(out)
        yield SSE_DONE
    finally:
        if not group.finished:
            log_client_left(path, streaming=True)
            await tm.abort(group)
