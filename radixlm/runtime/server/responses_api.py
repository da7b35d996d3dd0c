"""The OpenAI Responses API: ``POST /v1/responses``, ``GET`` and ``DELETE /v1/responses/{id}``.

A request is planned as the chat completion it amounts to (``responses_protocol.chat_request`` ->
``chat_plan.plan_chat``: the same prompt, tool grammars and reasoning split as Chat Completions), so
tool calls under ``required`` or a named ``tool_choice`` always parse. ``previous_response_id``
continues a stored response (``responses_store``); the stream sends the Responses event types in
their order (``responses_output``), each with its ``sequence_number``.
"""

from __future__ import annotations

import functools
import itertools
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from radixlm.runtime.messages import CLIENT_ABORT_STATUS, ReleasePinsReq
from radixlm.runtime.server.chat_plan import ChatPlan, plan_chat
from radixlm.runtime.server.errors import ApiError
from radixlm.runtime.server.http_util import ClientDisconnected, read_body_costed, until_done_or_disconnect
from radixlm.runtime.server.offload import maybe_off_loop
from radixlm.runtime.server.openai_protocol import parse_body
from radixlm.runtime.server.req_state import ReqGroup
from radixlm.runtime.server.responses_items import input_items, items_to_messages
from radixlm.runtime.server.responses_output import Event, OutputBuilder
from radixlm.runtime.server.responses_protocol import ResponsesRequest, chat_request
from radixlm.runtime.server.responses_store import ResponseStore, StoredResponse
from radixlm.runtime.server.tokenizer_manager import GenerateItem

router = APIRouter(prefix="/v1")


@router.post("/responses")
async def create_response(request: Request) -> Any:
    req, cost = await read_body_costed(request, functools.partial(parse_body, ResponsesRequest))
    run = await _Run.start(request, req, cost)
    if req.stream:
        return await run.stream()
    try:
        await until_done_or_disconnect(run.group.wait(), request)
    finally:
        if not run.group.finished:
            await run.tm.abort(run.group)
    error = run.group.first_error()
    if error is not None:
        raise error
    _, body = await run.complete()
    return body


@router.get("/responses/{response_id}")
async def get_response(request: Request, response_id: str) -> Any:
    stored = _store(request).get(response_id)
    if stored is None:
        raise ApiError(f"no stored response with id {response_id!r}", 404, param="response_id")
    return stored.body


@router.delete("/responses/{response_id}")
async def delete_response(request: Request, response_id: str) -> Any:
    if not await _store(request).delete(response_id):
        raise ApiError(f"no stored response with id {response_id!r}", 404, param="response_id")
    return {"id": response_id, "object": "response", "deleted": True}


def _store(request: Request) -> ResponseStore:
    return request.app.state.responses


class _Run:
    """One response being generated: its plan, its request group and its output items."""

    def __init__(self, request: Request, req: ResponsesRequest) -> None:
        self.request = request
        self.req = req
        self.tm = request.app.state.tokenizer_manager
        self.store = _store(request)
        self.id = f"resp_{uuid.uuid4().hex}"
        self.created_at = time.time()
        self.model = request.app.state.served_model_name
        self.builder = OutputBuilder()
        self.stored = False
        self.items: list[dict[str, Any]] = []
        self.plan: ChatPlan
        self.input_ids: list[int] = []
        self.group: ReqGroup

    @classmethod
    async def start(cls, request: Request, req: ResponsesRequest, cost: int) -> _Run:
        """Plan and submit ``req`` (``cost``: its body's ``body_cost``, so a body with large grammar
        inputs is planned off the loop); raises ``ApiError`` (400) naming what is wrong with it."""
        run = cls(request, req)
        previous = None
        if req.previous_response_id is not None:
            previous = run.store.get(req.previous_response_id)
            if previous is None:
                raise ApiError(
                    f"previous response {req.previous_response_id!r} not found (not stored, deleted or "
                    "evicted)",
                    param="previous_response_id",
                )
        history = previous.items if previous is not None else []
        run.items = history + input_items(req.input)
        messages = items_to_messages(run.items, len(history))
        if req.instructions:
            messages.insert(0, {"role": "system", "content": req.instructions})
        if not messages:
            raise ApiError("input must not be empty", param="input")
        server_args = request.app.state.server_args
        size = max(cost, sum(len(str(m.get("content") or "")) for m in messages))
        chat = chat_request(req, messages)
        run.plan = await maybe_off_loop(size, plan_chat, chat, run.tm, server_args, req.max_output_tokens)
        head, rest = run.store.continuation(previous, run.plan.prompt) if previous else ([], run.plan.prompt)
        rest_item = GenerateItem(run.plan.sampling_params, text=rest, add_special_tokens=False)
        run.input_ids = head + await maybe_off_loop(len(rest), run.tm.tokenize, rest_item)
        unpin = []
        if previous is not None and previous.pinned:  # this turn's admission releases the previous pin
            previous.pinned = False
            unpin = [previous.rid]
        item = GenerateItem(
            run.plan.sampling_params,
            input_ids=run.input_ids,
            rid=run.id,
            fill_context=req.max_output_tokens is None,
            pin_children=1 if req.store else 0,
            unpin_rids=unpin,
            pin_timeout_s=server_args.session_timeout if req.store else None,
            priority=req.priority,
        )
        run.group = await run.tm.submit([item], req.stream, logprob_text=False)
        return run

    # ---- the response object -----------------------------------------------------------------
    def body(self, status: str, usage: dict[str, Any] | None = None) -> dict[str, Any]:
        req = self.req
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": None,
            "incomplete_details": incomplete,
            "instructions": req.instructions,
            "max_output_tokens": req.max_output_tokens,
            "model": self.model,
            "output": [dict(item) for item in self.builder.items] if status != "in_progress" else [],
            "parallel_tool_calls": req.parallel_tool_calls is not False,
            "previous_response_id": req.previous_response_id,
            "reasoning": req.reasoning.model_dump() if req.reasoning else {"effort": None, "summary": None},
            "store": req.store,
            "temperature": 1.0 if req.temperature is None else req.temperature,
            "text": req.text_value(),
            "tool_choice": req.tool_choice_value(),
            "tools": [t.model_dump() for t in req.tools or []],
            "top_p": 1.0 if req.top_p is None else req.top_p,
            "truncation": "disabled",
            "usage": usage,
            "user": req.user,
            "metadata": req.metadata or {},
        }

    async def complete(self) -> tuple[list[Event], dict[str, Any]]:
        """The finished output: the events that close its items, the final response object (stored
        when ``store``)."""
        sample = self.group.samples[0]
        reason = (sample.meta.get("finish_reason") or {}).get("type")
        status = "incomplete" if reason == "length" else "completed"
        self.builder.status = status
        snap = self.plan.reader.read(sample.text, True)
        events = self.builder.update(snap, True)
        reasoning_tokens = (
            len(self.tm.tokenizer.encode(snap.reasoning, add_special_tokens=False)) if snap.reasoning else 0
        )
        prompt, completion = sample.meta["prompt_tokens"], sample.meta["completion_tokens"]
        cached = sample.meta["cached_tokens"]
        usage = {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": prompt - cached},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": prompt + completion,
        }
        body = self.body(status, usage)
        if self.req.store:
            output_ids = [int(t) for t in sample.response.output_ids]
            stored = StoredResponse(
                body,
                self.items + body["output"],
                self.plan.prompt,
                self.input_ids,
                output_ids,
                self.id,
                pinned=reason != "abort",  # the scheduler pins what ran with pin_children and ended normally
            )
            await self.store.put(stored)
            self.stored = True
        return events, body

    # ---- streaming ---------------------------------------------------------------------------
    async def stream(self) -> Response:
        """Stream events; a request rejected before its first token gets an error status instead."""
        try:
            await until_done_or_disconnect(self.group.changed.wait(), self.request)
        except ClientDisconnected:
            await self.tm.abort(self.group)
            return Response(status_code=CLIENT_ABORT_STATUS)
        error = self.group.first_error()
        if error is not None:
            await self.tm.abort(self.group)
            raise error
        return StreamingResponse(self._events(), media_type="text/event-stream")

    async def _events(self) -> AsyncIterator[str]:
        numbers = itertools.count()

        def sse(event: Event) -> str:
            data = json.dumps({**event, "sequence_number": next(numbers)}, ensure_ascii=False)
            return f"event: {event['type']}\ndata: {data}\n\n"

        try:
            yield sse({"type": "response.created", "response": self.body("in_progress")})
            yield sse({"type": "response.in_progress", "response": self.body("in_progress")})
            async for sample in self.group.updates():
                if sample.error is not None:
                    error = sample.error
                    yield sse(
                        {
                            "type": "error",
                            "code": str(error.status_code),
                            "message": error.message,
                            "param": error.param,
                        }
                    )
                    failed = {
                        **self.body("failed"),
                        "error": {"code": "server_error", "message": error.message},
                    }
                    yield sse({"type": "response.failed", "response": failed})
                    return
                if sample.finished:
                    break
                for event in self.builder.update(self.plan.reader.read(sample.text, False), False):
                    yield sse(event)
            events, body = await self.complete()
            for event in events:
                yield sse(event)
            done = "response.incomplete" if body["status"] == "incomplete" else "response.completed"
            yield sse({"type": done, "response": body})
        finally:
            if not self.group.finished:
                await self.tm.abort(self.group)
            elif self.req.store and not self.stored and self.group.first_error() is None:
                await self.tm.send(ReleasePinsReq([self.id]))  # finished, pinned, never stored
