"""The embedding server's routes (``--is-embedding``): OpenAI ``/v1/embeddings``, SGLang's ``/encode``
and ``/v1/rerank``, and ``/classify`` (vLLM's shape). Each request is one ``EncodeReq`` to the
scheduler, answered as a whole; ``serving_mode.py`` refuses them on a generating server."""

from __future__ import annotations

import base64
import math
import time
import uuid
from typing import Any

import numpy as np
from fastapi import APIRouter, Request

from radixlm.runtime.messages import EncodeReq
from radixlm.runtime.pooling.encode_inputs import tokenize_inputs, tokenize_pairs
from radixlm.runtime.requests.request_validation import InvalidRequest
from radixlm.runtime.server.embeddings_protocol import (
    ClassifyRequest,
    EmbeddingRequest,
    EncodeRequest,
    RerankRequest,
)
from radixlm.runtime.server.errors import ApiError
from radixlm.runtime.server.http_util import read_json_sized, until_done_or_disconnect
from radixlm.runtime.server.offload import maybe_off_loop
from radixlm.runtime.server.openai_protocol import parse_body
from radixlm.runtime.server.tokenizer_manager import TokenizerManager

router = APIRouter()


def _tm(request: Request) -> TokenizerManager:
    return request.app.state.tokenizer_manager


async def _run(request: Request, req: EncodeReq) -> list[list[float]]:
    """``req``'s vectors; a client that leaves first has ``req`` aborted (``EncodeCalls.call``)."""
    tm = _tm(request)
    if tm.dead is not None:
        raise ApiError(f"the server is shutting down: {tm.dead}", 503)
    out = await until_done_or_disconnect(tm.encodes.call(req), request)
    if out.error:
        field = out.error.split(":", 1)[0] if out.status == 400 else None
        raise ApiError(out.error, out.status, param=field)
    return out.vectors


async def _tokenized(request: Request, model: type, field: str) -> tuple[Any, list[list[int]], bool]:
    body, size = await read_json_sized(request)
    tm = _tm(request)

    def parse() -> tuple[Any, list[list[int]], bool]:
        req = parse_body(model, body)
        value = getattr(req, field)
        if value is None:
            raise ApiError(f"{field} is required", param=field)
        try:
            ids, single = tokenize_inputs(tm.tokenizer, value, tm.limits, field)
        except InvalidRequest as e:
            raise ApiError(str(e), param=e.param) from e
        return req, ids, single

    return await maybe_off_loop(size, parse)


@router.post("/v1/embeddings")
async def embeddings(request: Request) -> dict[str, Any]:
    """OpenAI's embeddings: ``data[i].embedding`` as floats or base64 of little-endian float32."""
    req, ids, _ = await _tokenized(request, EmbeddingRequest, "input")
    vectors = await _run(request, EncodeReq(uuid.uuid4().hex, "embed", ids, dimensions=req.dimensions))
    tokens = sum(len(s) for s in ids)

    def encoded(v: list[float]) -> Any:
        if req.encoding_format == "float":
            return v
        return base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode()

    return {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": encoded(v)} for i, v in enumerate(vectors)],
        "model": request.app.state.served_model_name,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


@router.post("/encode")
async def encode(request: Request) -> Any:
    """SGLang's ``/encode``: ``{"embedding", "meta_info"}``, a list of them for a list of inputs."""
    body, _ = await read_json_sized(request)
    if isinstance(body, dict) and body.get("text") is not None and body.get("input_ids") is not None:
        raise ApiError("give text or input_ids, not both", param="text")
    field = "input_ids" if isinstance(body, dict) and body.get("text") is None else "text"
    req, ids, single = await _tokenized(request, EncodeRequest, field)
    rid = req.rid if isinstance(req.rid, str) else uuid.uuid4().hex
    vectors = await _run(request, EncodeReq(rid, "embed", ids, dimensions=req.dimensions))
    rids = req.rid if isinstance(req.rid, list) and len(req.rid) == len(ids) else [rid] * len(ids)
    outs = [
        {"embedding": v, "meta_info": {"id": r, "prompt_tokens": len(s)}}
        for v, s, r in zip(vectors, ids, rids, strict=True)
    ]
    return outs[0] if single else outs


@router.post("/v1/rerank")
@router.post("/rerank")
async def rerank(request: Request) -> list[dict[str, Any]]:
    """SGLang's rerank: ``[{"score", "document", "index", "meta_info"}]``, best first (``top_n``); a
    decoder reranker's score is P("yes") against "no" on its prompt (``instruction`` optional)."""
    body, size = await read_json_sized(request)
    tm = _tm(request)

    def parse() -> tuple[RerankRequest, list[list[int]], list[list[int]]]:
        req = parse_body(RerankRequest, body)
        try:
            fmt = tm.model_info.get("rerank_format")
            pairs = tokenize_pairs(tm.tokenizer, req.query, req.documents, tm.limits, fmt, req.instruction)
            return (req, *pairs)
        except InvalidRequest as e:
            raise ApiError(str(e), param=e.param) from e

    req, ids, types = await maybe_off_loop(size, parse)
    logits = await _run(request, EncodeReq(uuid.uuid4().hex, "classify", ids, token_type_ids=types))
    if len(logits[0]) != 1:
        raise ApiError(f"rerank needs a one-label cross-encoder; this model has {len(logits[0])} labels")
    results = []
    for i, (row, seq) in enumerate(zip(logits, ids, strict=True)):
        item: dict[str, Any] = {"score": 1.0 / (1.0 + math.exp(-row[0])), "index": i}
        if req.return_documents:
            item["document"] = req.documents[i]
        item["meta_info"] = {"prompt_tokens": len(seq)}
        results.append(item)
    results.sort(key=lambda r: -r["score"])
    return results[: req.top_n] if req.top_n else results


@router.post("/classify")
@router.post("/v1/classify")
async def classify(request: Request) -> dict[str, Any]:
    """vLLM's classify: per input its label, class probabilities and raw ``logits`` (a reward model's
    score is its one logit)."""
    _, ids, _ = await _tokenized(request, ClassifyRequest, "input")
    tm = _tm(request)
    logits = await _run(request, EncodeReq(uuid.uuid4().hex, "classify", ids))
    names = tm.model_info.get("id2label") or {}
    data = []
    for i, row in enumerate(logits):
        scores = np.asarray(row, dtype=np.float64)
        probs = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
        best = int(scores.argmax())
        label = names.get(str(best), names.get(best, f"LABEL_{best}"))
        item = {"index": i, "label": label, "probs": probs.tolist(), "logits": row, "num_classes": len(row)}
        data.append(item)
    tokens = sum(len(s) for s in ids)
    return {
        "id": f"classify-{uuid.uuid4().hex}",
        "object": "list",
        "created": int(time.time()),
        "model": request.app.state.served_model_name,
        "data": data,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
