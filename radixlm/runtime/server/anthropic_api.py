"""The Anthropic Messages API: ``POST /v1/messages`` (streamed or not) and ``/v1/messages/count_tokens``.

A request is translated to the chat completion it means (``anthropic_messages``) and planned by the
chat path (``chat_plan``: template, tool prompt and grammars, reasoning parser); the output is read
into content blocks by ``anthropic_output``. Errors answer in Anthropic's shape.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from radixlm.runtime.messages import CLIENT_ABORT_STATUS
from radixlm.runtime.server.anthropic_messages import ChatTranslation, chat_request
from radixlm.runtime.server.anthropic_output import BlockWriter, Event, sse_event, stop_reason, usage
from radixlm.runtime.server.anthropic_protocol import CountTokensRequest, MessagesRequest
from radixlm.runtime.server.chat_plan import ChatPlan, plan_chat
from radixlm.runtime.server.errors import AnthropicError, ApiError, anthropic_error_body
from radixlm.runtime.server.function_call.streaming import ChatOutputReader
from radixlm.runtime.server.http_util import ClientDisconnected, read_body_costed, until_done_or_disconnect
from radixlm.runtime.server.offload import maybe_off_loop
from radixlm.runtime.server.openai_protocol import parse_body
from radixlm.runtime.server.req_state import ReqGroup, SampleState
from radixlm.runtime.server.tokenizer_manager import GenerateItem, TokenizerManager

router = APIRouter(prefix="/v1")
Route = Callable[[Request], Awaitable[Any]]


def anthropic_errors(route: Route) -> Route:
    """Answer the route's ``ApiError``s in Anthropic's error shape."""

    @functools.wraps(route)
    async def wrapped(request: Request) -> Any:
        try:
            return await route(request)
        except AnthropicError:
            raise
        except ApiError as e:
            raise AnthropicError.of(e) from e

    return wrapped


def _tm(request: Request) -> TokenizerManager:
    return request.app.state.tokenizer_manager


async def _plan(request: Request, req: CountTokensRequest, cost: int) -> tuple[ChatPlan, ChatTranslation]:
    translation = chat_request(req)
    chat = translation.chat
    args = request.app.state.server_args
    # ``cost`` (the body's ``body_cost``) already counts every message: they all arrive in the body
    plan = await maybe_off_loop(cost, plan_chat, chat, _tm(request), args, chat.max_tokens)
    if translation.prefill:  # the answer continues the prefill: no thinking before it
        reader = ChatOutputReader(None, plan.reader.tools)
        plan = ChatPlan(plan.prompt + translation.prefill, plan.sampling_params, reader)
    return plan, translation


@router.post("/messages/count_tokens")
@anthropic_errors
async def count_tokens(request: Request) -> dict[str, Any]:
    req, cost = await read_body_costed(request, functools.partial(parse_body, CountTokensRequest))
    plan, _ = await _plan(request, req, cost)
    item = GenerateItem(plan.sampling_params, text=plan.prompt, add_special_tokens=False)
    ids = await maybe_off_loop(len(plan.prompt), _tm(request).tokenize, item)
    return {"input_tokens": len(ids)}


@router.post("/messages")
@anthropic_errors
async def messages(request: Request) -> Any:
    req, cost = await read_body_costed(request, functools.partial(parse_body, MessagesRequest))
    plan, translation = await _plan(request, req, cost)
    item = GenerateItem(
        plan.sampling_params, text=plan.prompt, add_special_tokens=False, priority=req.priority
    )
    tm = _tm(request)
    group = await tm.submit([item], req.stream, logprob_text=False)
    answer = _Answer(request, req, plan, translation)
    try:
        # streamed: until the first output, so a request refused before it gets an error status
        await until_done_or_disconnect(group.changed.wait() if req.stream else group.wait(), request)
    except ClientDisconnected:
        await tm.abort(group)
        return Response(status_code=CLIENT_ABORT_STATUS)
    except BaseException:
        await tm.abort(group)
        raise
    error = group.first_error()
    if error is not None:
        await tm.abort(group)
        raise error
    if req.stream:
        return StreamingResponse(answer.events(group), media_type="text/event-stream")
    sample = group.samples[0]
    answer.read(sample)
    answer.writer.finish()
    return answer.message(sample, final=True)


class _Answer:
    """One answer's message envelope and blocks."""

    def __init__(self, request: Request, req: MessagesRequest, plan: ChatPlan, t: ChatTranslation) -> None:
        self.request = request
        self.req = req
        self.plan = plan
        self.id = f"msg_{uuid.uuid4().hex}"
        show = req.thinking is None or req.thinking.display != "omitted"
        self.writer = BlockWriter(self.id, None if t.parallel_tool_use else 1, show)
        self.called = False

    def message(self, sample: SampleState, final: bool) -> dict[str, Any]:
        reason, sequence = (None, None)
        if final:
            finish = sample.meta.get("finish_reason") or {}
            room_left = sample.meta["completion_tokens"] >= self.req.max_tokens
            reason, sequence = stop_reason(finish, self.called, self.req.stop_sequences, room_left)
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.request.app.state.served_model_name,
            "content": self.writer.blocks if final else [],
            "stop_reason": reason,
            "stop_sequence": sequence,
            "usage": usage(sample.meta),
        }

    def read(self, sample: SampleState) -> list[Event]:
        snap = self.plan.reader.read(sample.text, sample.finished)
        if sample.finished:
            self.called = bool(snap.calls)
        return self.writer.update(snap)

    async def events(self, group: ReqGroup) -> AsyncIterator[str]:
        """``message_start``, ``ping``, the blocks' events, ``message_delta`` and ``message_stop``."""
        tm = self.request.app.state.tokenizer_manager
        started = False
        try:
            async for sample in group.updates():
                if sample.error is not None:
                    yield sse_event(anthropic_error_body(sample.error.message, sample.error.status_code))
                    return
                if not started:
                    yield sse_event({"type": "message_start", "message": self.message(sample, final=False)})
                    yield sse_event({"type": "ping"})
                    started = True
                for event in self.read(sample):
                    yield sse_event(event)
            sample = group.samples[0]
            for event in self.writer.finish():
                yield sse_event(event)
            final = self.message(sample, final=True)
            delta = {"stop_reason": final["stop_reason"], "stop_sequence": final["stop_sequence"]}
            yield sse_event({"type": "message_delta", "delta": delta, "usage": final["usage"]})
            yield sse_event({"type": "message_stop"})
        finally:
            if not group.finished:
                await tm.abort(group)
