"""``POST /separate_reasoning`` (SGLang's native route): split a finished output's thinking from its answer.

Body ``{"text": str, "reasoning_parser": "deepseek-r1" | "qwen3"}`` (the parser defaults to the
server's ``--reasoning-parser``); answer ``{"text": answer, "reasoning_text": thinking}``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from radixlm.program.reasoning import separate_reasoning
from radixlm.runtime.server.errors import ApiError
from radixlm.runtime.server.http_util import read_json

router = APIRouter()


@router.post("/separate_reasoning")
async def separate_reasoning_route(request: Request) -> dict[str, Any]:
    body = await read_json(request)
    if not isinstance(body, dict) or not isinstance(body.get("text"), str):
        raise ApiError("text must be a string", param="text")
    server_args = getattr(request.app.state, "server_args", None)
    parser = body.get("reasoning_parser")
    if parser is None:
        parser = getattr(server_args, "reasoning_parser", "none")
    elif not isinstance(parser, str):
        raise ApiError("reasoning_parser must be a string", param="reasoning_parser")
    try:
        reasoning, answer = separate_reasoning(body["text"], parser)
    except ValueError as e:
        raise ApiError(str(e), param="reasoning_parser") from e
    return {"text": answer, "reasoning_text": reasoning}
