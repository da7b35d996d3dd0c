"""``POST /infill``: llama-server's fill-in-the-middle endpoint (what llama.vim / llama.vscode call).

Accepted: ``input_prefix``, ``input_suffix``, ``prompt`` (text after the middle marker, the start of
the infill already typed), ``n_predict`` (or ``max_tokens``), ``temperature``, ``top_k``, ``top_p``,
``min_p``, ``seed``, ``stop``, ``ignore_eos``. A non-empty ``input_extra`` (repository context
chunks) and streaming are refused with a 400. The answer is llama-server's ``content``,
``tokens_predicted``, ``tokens_evaluated`` and ``stop_type``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from radixlm.runtime.sampling.sampling_params import SamplingParams
from radixlm.runtime.server.errors import ApiError
from radixlm.runtime.server.fim import fim_input_ids
from radixlm.runtime.server.http_util import read_json_sized, until_done_or_disconnect
from radixlm.runtime.server.offload import body_cost, maybe_off_loop
from radixlm.runtime.server.openai_protocol import parse_body
from radixlm.runtime.server.tokenizer_manager import GenerateItem, TokenizerManager

router = APIRouter()

_STOP_TYPES = {"length": "limit", "stop": "word", "abort": "none"}


class InfillRequest(BaseModel):
    """llama-server's ``/infill`` body (the subset served; anything else is a 400)."""

    model_config = ConfigDict(extra="forbid")
    input_prefix: str = ""
    input_suffix: str = ""
    prompt: str = ""  # after the middle marker: the start of the infill already typed
    input_extra: list[Any] = Field(default_factory=list, max_length=0)  # repository chunks: refused
    n_predict: int | None = Field(None, ge=-1)  # -1: up to the context (llama-server)
    max_tokens: int | None = Field(None, ge=0)
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    seed: int | None = Field(None, ge=-(2**63), lt=2**64)
    stop: list[Annotated[str, Field(min_length=1)]] | None = None
    ignore_eos: bool = False
    stream: Literal[False] = False
    model: str | None = None


def _infill_item(body: Any, tokenizer: Any, model: str) -> GenerateItem:
    req: InfillRequest = parse_body(InfillRequest, body)
    names = ("temperature", "top_k", "top_p", "min_p", "seed", "stop")
    params: dict[str, Any] = {k: getattr(req, k) for k in names if getattr(req, k) is not None}
    params["ignore_eos"] = req.ignore_eos
    n_predict = req.n_predict if req.n_predict is not None else req.max_tokens
    if n_predict is not None and n_predict >= 0:
        params["max_new_tokens"] = n_predict
    try:
        sampling_params = SamplingParams.from_dict(params)
    except (ValueError, TypeError) as e:
        raise ApiError(str(e)) from e
    prefix, suffix = req.input_prefix, req.input_suffix
    ids = fim_input_ids(tokenizer, model, prefix, suffix, req.prompt, param="input_suffix")
    return GenerateItem(sampling_params, input_ids=ids, fill_context="max_new_tokens" not in params)


@router.post("/infill")
async def infill(request: Request) -> dict[str, Any]:
    tm: TokenizerManager = request.app.state.tokenizer_manager
    body, size = await read_json_sized(request)
    model = request.app.state.served_model_name
    item = await maybe_off_loop(body_cost(body, size), _infill_item, body, tm.tokenizer, model)
    group = await tm.submit([item], False, logprob_text=False)
    try:
        await until_done_or_disconnect(group.wait(), request)
    finally:
        if not group.finished:
            await tm.abort(group)
    error = group.first_error()
    if error is not None:
        raise error
    sample = group.samples[0]
    reason = (sample.meta.get("finish_reason") or {}).get("type")
    return {
        "content": sample.text,
        "model": model,
        "tokens_predicted": sample.meta["completion_tokens"],
        "tokens_evaluated": sample.meta["prompt_tokens"],
        "stop": True,
        "stop_type": _STOP_TYPES.get(reason or "", "eos"),
    }
