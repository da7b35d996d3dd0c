"""``/update_weights_from_disk``, ``/start_profile`` and ``/stop_profile`` (SGLang's names and bodies).

A weight update waits for the requests in flight to finish on the old weights (new ones queue in the
meantime), then swaps the weights and drops the prefix cache: ``scheduler/ops_control.py``.
"""

from __future__ import annotations

import asyncio
import time

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict

from radixlm.runtime.messages import ProfileOut, ProfileReq, UpdateWeightsOut, UpdateWeightsReq
from radixlm.runtime.server.errors import ApiError
from radixlm.runtime.server.http_util import read_json
from radixlm.runtime.server.openai_protocol import parse_body
from radixlm.runtime.server.tokenizer_manager import TokenizerManager

router = APIRouter()
UPDATE_WAIT_S = 600.0  # how long an update waits for the running requests before giving up
RETRY_S = 0.02


class UpdateWeightsRequest(BaseModel):
    """SGLang's ``UpdateWeightFromDiskReqInput``; the fields it has that we do not act on are accepted."""

    model_config = ConfigDict(extra="forbid")
    model_path: str
    load_format: str | None = None
    abort_all_requests: bool = False  # abort the requests in flight instead of waiting for them
    flush_cache: bool = True  # always flushed: KV computed with the old weights is stale
    weight_version: str | None = None
    is_async: bool = False
    torch_empty_cache: bool = False
    keep_pause: bool = False
    recapture_cuda_graph: bool = False
    token_step: int = 0


class ProfileRequest(BaseModel):
    """SGLang's ``ProfileReqInput`` (the options it has for multi-stage profiling are accepted)."""

    model_config = ConfigDict(extra="forbid")
    output_dir: str | None = None
    start_step: int | None = None
    num_steps: int | None = None
    activities: list[str] | None = None
    profile_by_stage: bool = False
    with_stack: bool | None = None
    record_shapes: bool | None = None
    merge_profiles: bool = False
    profile_prefix: str | None = None


def _tm(request: Request) -> TokenizerManager:
    return request.app.state.tokenizer_manager


def _refuse_replicas(request: Request, what: str) -> None:
    args = request.app.state.server_args
    if args.tp_size > 1 or args.dp_size > 1:
        raise ApiError(f"{what} is not supported with tensor or data parallelism (tp_size/dp_size > 1)")


@router.post("/update_weights_from_disk")
async def update_weights_from_disk(request: Request) -> JSONResponse:
    """``{"success", "message"}``; a checkpoint of another architecture or shape fails (400) and the
    old weights keep serving."""
    req = parse_body(UpdateWeightsRequest, await read_json(request))
    _refuse_replicas(request, "updating weights")
    tm = _tm(request)
    if req.abort_all_requests:
        await tm.abort_all()
    msg = UpdateWeightsReq(req.model_path, req.load_format)
    deadline = time.monotonic() + UPDATE_WAIT_S
    while True:
        out: UpdateWeightsOut = await tm.request_reply(msg, UpdateWeightsOut)
        if not out.busy:
            break
        if time.monotonic() > deadline:
            raise ApiError(f"requests still ran after {UPDATE_WAIT_S:.0f} s: weights not updated", 503)
        await asyncio.sleep(RETRY_S)
    if not out.success:
        return JSONResponse({"success": False, "message": out.message}, 400)
    tm.model_info["local_model_path"] = req.model_path
    return JSONResponse({"success": True, "message": out.message})


@router.post("/start_profile")
async def start_profile(request: Request) -> Response:
    """Start the torch profiler in the scheduler; 400 when it already runs."""
    body = await read_json(request) if await request.body() else {}
    req = parse_body(ProfileRequest, body)
    _refuse_replicas(request, "profiling")
    msg = ProfileReq("start", req.output_dir, req.num_steps, req.activities)
    out: ProfileOut = await _tm(request).request_reply(msg, ProfileOut)
    if not out.success:
        raise ApiError(out.message)
    return Response(f"Start profiling: {out.message}\n", media_type="text/plain")


@router.post("/stop_profile")
async def stop_profile(request: Request) -> Response:
    """Stop the profiler and write its trace; 400 when it does not run."""
    out: ProfileOut = await _tm(request).request_reply(ProfileReq("stop"), ProfileOut)
    if not out.success:
        raise ApiError(out.message)
    return Response(f"Stop profiling: {out.message}\n", media_type="text/plain")
