"""``/open_session`` and ``/close_session`` (SGLang's), and a ``/generate`` turn of a session."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from radixlm.runtime.server.errors import ApiError
from radixlm.runtime.server.http_util import read_json
from radixlm.runtime.server.native_protocol import GenerateRequest
from radixlm.runtime.server.req_state import ReqGroup
from radixlm.runtime.server.sessions import SessionStore

router = APIRouter()


@router.post("/open_session")
async def open_session(request: Request) -> Any:
    """``{"capacity_of_str_len": int, "session_id": optional}`` -> the session id (a JSON string)."""
    return await request.app.state.sessions.open(await read_json(request))


@router.post("/close_session")
async def close_session(request: Request) -> Response:
    """``{"session_id": str}``: abort its running turns, release its pinned contexts."""
    body = await read_json(request)
    if not isinstance(body, dict):
        raise ApiError("the request body must be a JSON object")
    await request.app.state.sessions.close(body.get("session_id"))
    return Response(status_code=200)


async def submit_session_turn(sessions: SessionStore, req: GenerateRequest) -> ReqGroup:
    """Submit the single prompt of ``req`` as a turn of the session ``req.session_params`` names."""
    item = await sessions.prepare_turn(req.items[0], req.session_params)
    try:
        group = await sessions.tm.submit([item], req.stream, req.return_text_in_logprobs)
    except ApiError:
        sessions.forget_turn(req.session_params.get("id"), item.rid)
        raise
    sessions.bind(req.session_params["id"], item.rid, group)
    return group
