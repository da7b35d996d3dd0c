"""Operations endpoints: ``/metrics`` (Prometheus, with ``--enable-metrics``), ``/health_generate``,
``/get_load``, ``/v1/models/{id}``, ``/v1/tokenize`` and ``/v1/detokenize`` (SGLang's shapes; large
ones run off the event loop, ``offload.py``)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict

from radixlm.runtime.sampling.sampling_params import SamplingParams
from radixlm.runtime.server.errors import ApiError, error_body
from radixlm.runtime.server.http_util import read_json_sized
from radixlm.runtime.server.offload import maybe_off_loop
from radixlm.runtime.server.openai_api import list_models
from radixlm.runtime.server.openai_protocol import parse_body
from radixlm.runtime.server.tokenizer_manager import GenerateItem, TokenizerManager

router = APIRouter()
HEALTH_GENERATE_TIMEOUT_S = 60.0


def _tm(request: Request) -> TokenizerManager:
    return request.app.state.tokenizer_manager


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    """Prometheus text format; 404 unless the server runs with ``--enable-metrics``."""
    from radixlm.runtime.server.metrics import CONTENT_TYPE

    tm = _tm(request)
    if tm.metrics is None:
        raise ApiError("metrics are off: start the server with --enable-metrics", 404)
    return Response(tm.metrics.render(await tm.get_stats()), media_type=CONTENT_TYPE)


@router.get("/health_generate")
@router.post("/health_generate")
async def health_generate(request: Request) -> Response:
    """200 once one token went through the model (prefill and a decode step); 503 otherwise."""
    tm = _tm(request)
    if tm.dead is not None:
        return JSONResponse(error_body(tm.dead, 503), 503)
    item = GenerateItem(SamplingParams(max_new_tokens=1, temperature=0.0, ignore_eos=True), input_ids=[0])
    group = await tm.submit([item], stream=False, logprob_text=False)
    try:
        await asyncio.wait_for(group.wait(), HEALTH_GENERATE_TIMEOUT_S)
    except asyncio.TimeoutError:
        await tm.abort(group)
        return JSONResponse(error_body(f"no token within {HEALTH_GENERATE_TIMEOUT_S:.0f} s", 503), 503)
    error = group.first_error()
    if error is not None or group.samples[0].meta.get("completion_tokens") != 1:
        why = error.message if error is not None else "no token"
        return JSONResponse(error_body(f"generation failed: {why}", 503), 503)
    return Response(status_code=200)


@router.get("/get_load")
async def get_load(request: Request) -> list[dict[str, Any]]:
    """One entry per data-parallel rank (one here): requests running and waiting, KV tokens held."""
    stats = await _tm(request).get_stats()
    waiting = stats.get("num_queued", 0) + stats.get("num_grammar_queue", 0)
    return [
        {
            "dp_rank": 0,
            "num_reqs": stats.get("num_running", 0) + waiting,
            "num_waiting_reqs": waiting,
            "num_tokens": stats.get("kv_used", 0),
        }
    ]


@router.get("/v1/models/{model_id:path}")
async def retrieve_model(model_id: str, request: Request) -> dict[str, Any]:
    card = (await list_models(request))["data"][0]
    if model_id != card["id"]:
        raise ApiError(
            f"the model {model_id!r} does not exist; this server serves {card['id']!r}", 404, param="model"
        )
    return card


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    prompt: str | list[str]
    add_special_tokens: bool = True


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    tokens: list[int] | list[list[int]]
    skip_special_tokens: bool = True


@router.post("/v1/tokenize")
@router.post("/tokenize")
async def tokenize(request: Request) -> dict[str, Any]:
    """``{"tokens", "count", "max_model_len"}``; lists of them for a list of prompts."""
    body, size = await read_json_sized(request)
    tm = _tm(request)

    def encode() -> tuple[TokenizeRequest, list[list[int]]]:
        req = parse_body(TokenizeRequest, body)
        prompts = [req.prompt] if isinstance(req.prompt, str) else req.prompt
        for p in prompts:
            tm.admission.check_prompt_text(p, "prompt")
        return req, [tm.tokenizer.encode(p, add_special_tokens=req.add_special_tokens) for p in prompts]

    req, tokens = await maybe_off_loop(size, encode)
    if isinstance(req.prompt, str):
        return {"tokens": tokens[0], "count": len(tokens[0]), "max_model_len": tm.context_length}
    return {"tokens": tokens, "count": [len(t) for t in tokens], "max_model_len": tm.context_length}


@router.post("/v1/detokenize")
@router.post("/detokenize")
async def detokenize(request: Request) -> dict[str, Any]:
    """``{"text"}`` (a list for a list of token lists); ids outside the vocabulary are a 400."""
    body, size = await read_json_sized(request)
    tm = _tm(request)

    def decode() -> Any:
        req = parse_body(DetokenizeRequest, body)
        single = not req.tokens or isinstance(req.tokens[0], int)
        lists: list[list[int]] = [req.tokens] if single else req.tokens  # type: ignore[list-item]
        vocab = tm.limits.vocab_size
        for ids in lists:
            bad = [t for t in ids if not 0 <= t < vocab]
            if bad:
                raise ApiError(f"tokens outside the vocabulary [0, {vocab}): {bad[:5]}", param="tokens")
        texts = [tm.tokenizer.decode(ids, skip_special_tokens=req.skip_special_tokens) for ids in lists]
        return texts[0] if single else texts

    # NOTE: a token id is a few bytes of the body and decodes to a few characters
    return {"text": await maybe_off_loop(size, decode)}
