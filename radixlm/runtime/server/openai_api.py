"""The OpenAI-compatible API: ``/v1/models``, ``/v1/completions``, ``/v1/chat/completions``."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from radixlm.runtime.messages import CLIENT_ABORT_STATUS
from radixlm.runtime.server.chat_plan import ChatPlan, plan_chat
from radixlm.runtime.server.errors import ApiError
from radixlm.runtime.server.fim import fim_input_ids
from radixlm.runtime.server.function_call.streaming import DeltaTracker
from radixlm.runtime.server.function_call.streaming import message as chat_message
from radixlm.runtime.server.http_util import (
    SSE_DONE,
    ClientDisconnected,
    log_client_left,
    read_json_sized,
    sse,
    until_done_or_disconnect,
)
from radixlm.runtime.server.lora_api import adapter_cards
from radixlm.runtime.server.offload import body_cost, maybe_off_loop
from radixlm.runtime.server.openai_protocol import ChatCompletionRequest, CompletionRequest, parse_body
from radixlm.runtime.server.req_state import ReqGroup, SampleState
from radixlm.runtime.server.tokenizer_manager import GenerateItem, TokenizerManager

router = APIRouter(prefix="/v1")


def _tm(request: Request) -> TokenizerManager:
    return request.app.state.tokenizer_manager


def _model_name(request: Request) -> str:
    return request.app.state.served_model_name


def _lora_name(request: Request, model: str | None) -> str | None:
    """The LoRA adapter the request's ``model`` names (``base:adapter`` or the adapter's name)."""
    return request.app.state.lora_names.adapter_for_model(model, _model_name(request))


@router.get("/models")
async def list_models(request: Request) -> dict[str, Any]:
    tm = _tm(request)
    card = {
        "id": _model_name(request),
        "object": "model",
        "created": int(request.app.state.started_at),
        "owned_by": "radixlm",
        "root": tm.model_info.get("model_path"),
        "max_model_len": tm.context_length,
    }
    return {"object": "list", "data": [card, *adapter_cards(request, card)]}


@router.post("/completions")
async def completions(request: Request) -> Any:
    body, size = await read_json_sized(request)
    _tm(request).admission.check_batch_before_parsing(body, ("prompt",))
    req, prompts, items = await maybe_off_loop(
        body_cost(body, size), _completion_items, body, _tm(request).tokenizer, _model_name(request)
    )
    for item in items:
        item.lora_name = _lora_name(request, req.model)

    def prefix(sample: SampleState) -> str:
        return echo[sample.index // req.n] if echo else ""

    def choice(sample: SampleState, text: str, start: int, final: bool, first: bool) -> dict[str, Any]:
        return {
            "index": sample.index,
            "text": text,
            "logprobs": _completion_logprobs(sample, start) if req.logprobs is not None else None,
            "finish_reason": _finish_reason(sample) if final else None,
            **_matched_stop(sample, final),
        }

    responder = _Responder(request, "cmpl", "text_completion", req.stream_options)
    group = await responder.submit(items, req.stream)
    decode = _tm(request).tokenizer.decode  # NOTE: after submit, which refused ids outside the vocabulary

    def echoed() -> list[str]:
        return [p if isinstance(p, str) else decode(p) for p in prompts]

    echo = None
    if req.echo:
        try:
            echo = await maybe_off_loop(sum(len(p) for p in prompts if not isinstance(p, str)), echoed)
        except BaseException:
            await responder.tm.abort(group)
            raise
    if req.stream:
        return await responder.stream(group, choice, prefix)
    await responder.wait(group)
    choices = [choice(s, prefix(s) + s.text, 0, True, True) for s in group.samples]
    return responder.body(choices, usage=_usage(group))


@router.post("/chat/completions")
async def chat_completions(request: Request) -> Any:
    body, size = await read_json_sized(request)
    args = request.app.state.server_args
    req, plan = await maybe_off_loop(body_cost(body, size), _chat_plan, body, _tm(request), args)
    max_new = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    item = GenerateItem(
        plan.sampling_params,
        text=plan.prompt,
        image_data=plan.images,
        add_special_tokens=False,
        rid=req.rid,
        return_logprob=req.logprobs,
        top_logprobs_num=req.top_logprobs or 0,
        fill_context=max_new is None,
        priority=req.priority,
        lora_name=_lora_name(request, req.model),
    )
    trackers: dict[int, DeltaTracker] = {}

    def choice(sample: SampleState, text: str, start: int, final: bool, first: bool) -> dict[str, Any]:
        logprobs = {"content": _chat_logprobs(sample, start)} if req.logprobs else None
        snap = plan.reader.read(sample.text, final)
        out = {
            "index": sample.index,
            "logprobs": logprobs,
            "finish_reason": plan.finish_reason(_finish_reason(sample), snap) if final else None,
            **_matched_stop(sample, final),
        }
        tracker = trackers.setdefault(sample.index, DeltaTracker())
        if req.stream:
            delta = tracker.delta(snap)
            if first:
                delta = {"role": "assistant", "content": delta.pop("content", ""), **delta}
            out["delta"] = delta
        else:
            out["message"] = chat_message(snap, tracker.call_ids(len(snap.calls)))
        return out

    responder = _Responder(request, "chatcmpl", "chat.completion", req.stream_options)
    group = await responder.submit([item], req.stream)
    if req.stream:
        return await responder.stream(group, choice, lambda sample: "")
    await responder.wait(group)
    choices = [choice(s, s.text, 0, True, True) for s in group.samples]
    return responder.body(choices, usage=_usage(group))


def _completion_items(
    body: Any, tokenizer: Any, model: str
) -> tuple[CompletionRequest, list[Any], list[GenerateItem]]:
    """The parsed body, its prompts and their items; what compiles the request's regexes. With a
    ``suffix``, each prompt is the prefix of a fill-in-the-middle prompt (``fim.py``)."""
    req: CompletionRequest = parse_body(CompletionRequest, body)
    if req.best_of not in (None, req.n):
        raise ApiError("best_of must equal n", param="best_of")
    if req.echo and req.logprobs is not None:
        raise ApiError("echo together with logprobs is not supported", param="echo")
    params = req.sampling_params(req.max_tokens)
    prompts = _completion_prompts(req.prompt)
    inputs = prompts
    if req.suffix is not None:
        inputs = [fim_input_ids(tokenizer, model, p, req.suffix) for p in prompts]
    items = [
        GenerateItem(
            params,
            text=p if isinstance(p, str) else None,
            input_ids=p if isinstance(p, list) else None,
            return_logprob=req.logprobs is not None,
            top_logprobs_num=req.logprobs or 0,
            fill_context=req.max_tokens is None,
            rid=req.rid if len(prompts) == 1 else None,
            priority=req.priority,
        )
        for p in inputs
    ]
    return req, prompts, items


def _chat_plan(body: Any, tm: TokenizerManager, server_args: Any) -> tuple[ChatCompletionRequest, ChatPlan]:
    """The parsed body and its plan (template, tool grammars, regexes compiled)."""
    req: ChatCompletionRequest = parse_body(ChatCompletionRequest, body)
    max_new = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    return req, plan_chat(req, tm, server_args, max_new)


# (sample, new text, index of its first new token, finished, first chunk of the sample) -> choice
ChoiceFn = Callable[[SampleState, str, int, bool, bool], dict[str, Any]]
PrefixFn = Callable[[SampleState], str]  # the text a sample's first chunk starts with (echo)


class _Responder:
    """What completions and chat completions share: submit, wait, stream, the response envelope."""

    def __init__(self, request: Request, id_prefix: str, obj: str, stream_options: Any) -> None:
        self.request = request
        self.tm = _tm(request)
        self.id = f"{id_prefix}-{uuid.uuid4().hex}"
        self.object = obj
        self.created = int(time.time())
        self.model = _model_name(request)
        self.include_usage = bool(stream_options and stream_options.include_usage)

    async def submit(self, items: list[GenerateItem], stream: bool) -> ReqGroup:
        return await self.tm.submit(items, stream, logprob_text=True)

    async def wait(self, group: ReqGroup) -> None:
        try:
            await until_done_or_disconnect(group.wait(), self.request)
        finally:
            if not group.finished:
                await self.tm.abort(group)
        error = group.first_error()
        if error is not None:
            raise error

    def body(
        self, choices: list[dict[str, Any]], usage: dict[str, Any] | None, obj: str | None = None
    ) -> dict:
        out = {
            "id": self.id,
            "object": obj or self.object,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        if usage is not None:
            out["usage"] = usage
        return out

    async def stream(self, group: ReqGroup, choice: ChoiceFn, prefix: PrefixFn) -> Response:
        """Stream deltas; a request rejected before its first token gets an error status instead."""
        try:
            await until_done_or_disconnect(group.changed.wait(), self.request)
        except ClientDisconnected:
            await self.tm.abort(group)
            return Response(status_code=CLIENT_ABORT_STATUS)
        error = group.first_error()
        if error is not None:
            await self.tm.abort(group)
            raise error
        return StreamingResponse(self._events(group, choice, prefix), media_type="text/event-stream")

    async def _events(self, group: ReqGroup, choice: ChoiceFn, prefix: PrefixFn) -> AsyncIterator[str]:
        chunk_obj = self.object if self.object == "text_completion" else "chat.completion.chunk"
        sent_text: dict[int, int | None] = {s.index: None for s in group.samples}  # None: nothing sent
        sent_tokens = {s.index: 0 for s in group.samples}
        try:
            async for sample in group.updates():
                if sample.error is not None:
                    yield sse(sample.error.body())
                    continue
                start = sent_text[sample.index]
                first = start is None
                text = prefix(sample) + sample.text if first else sample.text[start:]
                if not text and not sample.finished and not first:
                    continue
                chunk = choice(sample, text, sent_tokens[sample.index], sample.finished, first)
                if chunk.get("delta") == {} and not sample.finished and not first:
                    continue  # a parser holds the new text back (a tool call forming): nothing to say yet
                yield sse(self.body([chunk], None, chunk_obj))
                sent_text[sample.index] = len(sample.text)
                sent_tokens[sample.index] = len(sample.logprobs.get("output_token_logprobs", []))
            if self.include_usage:
                yield sse(self.body([], _usage(group), chunk_obj))
            yield SSE_DONE
        finally:
            if not group.finished:
                log_client_left(self.request.url.path, streaming=True)
                await self.tm.abort(group)


def _completion_prompts(prompt: Any) -> list[Any]:
    if isinstance(prompt, str):
        return [prompt]
    if prompt and all(isinstance(p, int) for p in prompt):
        return [prompt]
    if not prompt:
        raise ApiError("prompt must not be empty", param="prompt")
    return list(prompt)


def _finish_reason(sample: SampleState) -> str | None:
    reason = sample.meta.get("finish_reason") or {}
    return reason.get("type")


def _matched_stop(sample: SampleState, final: bool) -> dict[str, Any]:
    reason = sample.meta.get("finish_reason") or {}
    if final and reason.get("type") == "stop" and reason.get("matched") is not None:
        return {"matched_stop": reason["matched"]}
    return {}


def _usage(group: ReqGroup) -> dict[str, Any]:
    first_of_prompt = {s.request_rid: s for s in reversed(group.samples)}.values()
    prompt_tokens = sum(s.meta["prompt_tokens"] for s in first_of_prompt)
    completion_tokens = sum(s.meta["completion_tokens"] for s in group.samples)
    cached = sum(s.meta["cached_tokens"] for s in first_of_prompt)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def _token_entries(sample: SampleState, start: int) -> tuple[list[list], list[list[list] | None]]:
    # NOTE: a max_tokens=0 request has SGLang's one next-token entry but no token in its text
    end = len(sample.response.output_ids)
    tokens = sample.logprobs.get("output_token_logprobs", [])[start:end]
    tops = sample.logprobs.get("output_top_logprobs", [])[start:end]
    return tokens, tops + [None] * (len(tokens) - len(tops))


def _completion_logprobs(sample: SampleState, start: int) -> dict[str, Any]:
    tokens, tops = _token_entries(sample, start)
    offsets, pos = [], 0
    for _, _, text in tokens:
        offsets.append(pos)
        pos += len(text)
    return {
        "tokens": [t[2] for t in tokens],
        "token_logprobs": [t[0] for t in tokens],
        "top_logprobs": [None if top is None else {e[2]: e[0] for e in top} for top in tops],
        "text_offset": offsets,
    }


def _chat_logprobs(sample: SampleState, start: int) -> list[dict[str, Any]]:
    tokens, tops = _token_entries(sample, start)

    def entry(e: list) -> dict[str, Any]:
        return {"token": e[2], "logprob": e[0], "bytes": list(e[2].encode("utf-8"))}

    return [{**entry(t), "top_logprobs": [entry(e) for e in (top or [])]} for t, top in zip(tokens, tops)]
