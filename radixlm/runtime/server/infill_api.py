"""``POST /infill``: llama-server's fill-in-the-middle endpoint (what llama.vim / llama.vscode call).

Accepted: ``input_prefix``, ``input_suffix``, ``prompt`` (text after the middle marker, the start of
the infill already typed), ``n_predict`` (or ``max_tokens``), ``temperature``, ``top_k``, ``top_p``,
``min_p``, ``seed``, ``stop``, ``ignore_eos``. ``input_extra`` (repository context chunks) and
streaming are refused with a 400. The answer is llama-server's ``content`` / ``tokens_predicted`` /
``tokens_evaluated`` / ``stop_type`` subset.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from radixlm.runtime.sampling.sampling_params import SamplingParams
from radixlm.runtime.server.errors import ApiError
from radixlm.runtime.server.fim import fim_input_ids
from radixlm.runtime.server.http_util import read_json_sized, until_done_or_disconnect
from radixlm.runtime.server.offload import body_cost, maybe_off_loop
from radixlm.runtime.server.tokenizer_manager import GenerateItem, TokenizerManager

router = APIRouter()

_TEXT_FIELDS = ("input_prefix", "input_suffix", "prompt")
_SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "min_p", "seed", "stop", "ignore_eos")
_FIELDS = {*_TEXT_FIELDS, *_SAMPLING_FIELDS, "n_predict", "max_tokens", "input_extra", "stream", "model"}
_STOP_TYPES = {"length": "limit", "stop": "word", "abort": "none"}


def _infill_item(body: Any, tokenizer: Any, model: str) -> GenerateItem:
    if not isinstance(body, dict):
        raise ApiError("the request body must be a JSON object")
    unknown = sorted(k for k in body if k not in _FIELDS)
    if unknown:
        raise ApiError(f"unknown field(s): {', '.join(unknown)}", param=unknown[0])
    if body.get("input_extra"):
        raise ApiError("input_extra (repository context) is not supported", param="input_extra")
    if body.get("stream"):
        raise ApiError("stream is not supported on /infill", param="stream")
    texts = {k: body.get(k) or "" for k in _TEXT_FIELDS}
    for name, value in texts.items():
        if not isinstance(value, str):
            raise ApiError(f"{name} must be a string", param=name)
    params: dict[str, Any] = {k: body[k] for k in _SAMPLING_FIELDS if body.get(k) is not None}
    n_predict = body.get("n_predict", body.get("max_tokens"))
    if n_predict is not None and n_predict >= 0:  # llama-server: -1 means up to the context
        params["max_new_tokens"] = n_predict
    try:
        sampling_params = SamplingParams.from_dict(params)
    except (ValueError, TypeError) as e:
        raise ApiError(str(e)) from e
    ids = fim_input_ids(
        tokenizer, model, texts["input_prefix"], texts["input_suffix"], texts["prompt"], param="input_suffix"
    )
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
