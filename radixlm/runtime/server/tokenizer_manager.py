"""The TokenizerManager: the main process's asyncio side of the runtime.

It tokenizes requests, sends them to the scheduler and routes the detokenizer's text outputs back; a dead
child process or a failed receive loop fails every pending request with a clear error, not a hang.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
import traceback
import uuid
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

import zmq
import zmq.asyncio

from radixlm.runtime.ipc import IpcAddrs, zmq_socket
from radixlm.runtime.messages import (
    AbortReq,
    BatchTextOut,
    EncodeOut,
    FlushCacheOut,
    FlushCacheReq,
    GetStatsReq,
    Heartbeat,
    ReleasePinsReq,
    ReqTextOut,
    SchedulerDied,
    StatsOut,
    TokenizedGenerateReq,
    expand_parallel_samples,
)
from radixlm.runtime.multimodal.request_images import ImageInputs
from radixlm.runtime.requests.request_ids import InvalidRid, check_client_rid
from radixlm.runtime.requests.request_validation import (
    InvalidRequest,
    ModelLimits,
    prompt_ids_array,
    validate_request,
)
from radixlm.runtime.server.admission import Admission, max_token_chars
from radixlm.runtime.server.chat_template_names import reserved_template_names
from radixlm.runtime.server.encode_calls import EncodeCalls
from radixlm.runtime.server.errors import ApiError
from radixlm.runtime.server.generate_item import GenerateItem
from radixlm.runtime.server.offload import REGEX_COST, grammar_chars, maybe_off_loop
from radixlm.runtime.server.req_state import ReqGroup, SampleState
from radixlm.runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)

REPLY_TIMEOUT_S = 120.0  # a long prefill step can delay a flush or stats reply


class TokenizerManager:
    """Submit requests, follow their outputs, abort them; flush the cache and read live stats."""

    def __init__(
        self,
        tokenizer: Any,
        model_info: dict[str, Any],
        addrs: IpcAddrs,
        chat_template: str | None = None,
        server_args: ServerArgs | None = None,
    ) -> None:
        server_args = server_args or ServerArgs()
        self.tokenizer = tokenizer
        self.model_info = model_info
        self.limits = ModelLimits.from_model_info(model_info, server_args)
        self.images = ImageInputs(model_info, server_args)  # a vision-language model's processor
        self.admission = Admission(server_args, self.limits.context_length, max_token_chars(tokenizer))
        self.context_length = self.limits.context_length
        self.stream_interval = server_args.stream_interval
        self.chat_template = chat_template
        ctx = zmq.asyncio.Context()
        self._push = zmq_socket(ctx, zmq.PUSH, addrs.scheduler, bind=False)
        self._pull = zmq_socket(ctx, zmq.PULL, addrs.tokenizer_manager, bind=True)
        self._samples: dict[str, SampleState] = {}  # scheduler rid (a sample's internal id) -> sample
        self._by_rid: dict[str, list[SampleState]] = {}  # client rid -> the samples it spawned
        self._replies: dict[type, deque[asyncio.Future]] = defaultdict(deque)
        self.encodes = EncodeCalls(self.send)  # embedding requests in flight, answered by rid
        self._recv_task: asyncio.Task | None = None
        self.dead: str | None = None
        self.on_fatal: Callable[[str], None] = lambda message: logger.error("%s", message)
        self.last_heartbeat = time.monotonic()
        self.token_text = functools.lru_cache(maxsize=1 << 16)(lambda t: self.tokenizer.decode([t]))
        self.metrics: Any | None = None  # a ServerMetrics with --enable-metrics
        # Called with each finished sample's last output (sessions record their turns' output ids).
        self.finish_hooks: list[Callable[[SampleState, ReqTextOut], None]] = []
        self.submit_hooks: list[Callable[[list[GenerateItem], list[str]], None]] = []  # sent: items, rids

    def start(self) -> None:
        """Start reading outputs (call inside the running event loop). Should the reader fail, the
        server fails as for a dead child: nothing else would ever finish a pending request."""
        self._recv_task = asyncio.get_running_loop().create_task(self._recv_loop())
        self._recv_task.add_done_callback(self._on_recv_loop_done)

    @property
    def num_pending(self) -> int:
        return len(self._samples)

    # ---- requests --------------------------------------------------------------------------
    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict] | None = None,
        template_kwargs: dict[str, Any] | None = None,
    ) -> str:
        """The prompt text; ``template_kwargs`` (the request's ``chat_template_kwargs``) may not name
        what the template is already given (messages, tools, ...): 400."""
        template_kwargs = template_kwargs or {}
        taken = sorted(set(template_kwargs) & reserved_template_names(self.tokenizer))
        if taken:
            raise ApiError(
                f"chat_template_kwargs may not set {', '.join(taken)} (set by the server)",
                param="chat_template_kwargs",
            )
        try:
            return self.tokenizer.apply_chat_template(
                messages,
                tokenize=False,
                add_generation_prompt=True,
                chat_template=self.chat_template,
                tools=tools,
                **template_kwargs,
            )
        except Exception as e:  # a template error is the request's fault (roles, content)
            raise ApiError(f"cannot apply the chat template: {e}") from e

    def tokenize(self, item: GenerateItem) -> list[int]:
        """The prompt's ids. Text segments are tokenized one by one without special tokens."""
        for text in _prompt_texts(item):
            self.admission.check_prompt_text(text, "input_segments" if item.input_segments else "text")
        if item.input_segments is not None:
            ids: list[int] = []
            for seg in item.input_segments:
                ids.extend(
                    seg["ids"]
                    if "ids" in seg
                    else self.tokenizer.encode(seg["text"], add_special_tokens=False)
                )
            return ids
        if item.input_ids is not None:
            return list(item.input_ids)
        return self.tokenizer.encode(item.text or "", add_special_tokens=item.add_special_tokens)

    def build_request(self, item: GenerateItem, rid: str, stream: bool) -> TokenizedGenerateReq:
        """Tokenize and check one prompt; raises ``ApiError`` (400) naming what the model cannot serve."""
        try:
            ids, mm = (
                self.images.prompt(item, self.admission.check_prompt_text)
                if item.image_data
                else (self.tokenize(item), None)
            )
            req = TokenizedGenerateReq(
                rid=rid,
                input_ids=prompt_ids_array(ids, self.limits),
                sampling_params=item.sampling_params,
                return_logprob=item.return_logprob,
                logprob_start_len=item.logprob_start_len,
                top_logprobs_num=item.top_logprobs_num,
                stream=stream,
                pin_children=item.pin_children,
                unpin_rids=list(item.unpin_rids),
                pin_timeout_s=item.pin_timeout_s,
                priority=item.priority,
                mm_inputs=mm,
                lora_name=item.lora_name,
            )
            validate_request(req, self.limits)
        except InvalidRequest as e:
            raise ApiError(str(e), param=e.param) from e
        if item.fill_context:
            room = self.context_length - len(req.input_ids)
            req = dataclasses.replace(
                req, sampling_params=dataclasses.replace(req.sampling_params, max_new_tokens=room)
            )
        return req

    async def submit(self, items: list[GenerateItem], stream: bool, logprob_text: bool) -> ReqGroup:
        """Validate, tokenize and send every prompt (``n`` samples each); raises ``ApiError``."""
        if self.dead is not None:
            raise ApiError(f"the server is shutting down: {self.dead}", 503)
        group = ReqGroup(
            items[0].rid or uuid.uuid4().hex, any(it.return_logprob for it in items), self.stream_interval
        )
        requests: list[tuple[str, TokenizedGenerateReq, list[TokenizedGenerateReq]]] = []
        try:
            # admitted before any tokenization: a batch that cannot run costs nothing
            for item in items:
                if item.sampling_params.n > self.limits.caps.max_n:  # the 400 that names n comes first
                    raise ApiError(f"n={item.sampling_params.n} is above this server's limit", param="n")
                self.admission.check_logit_processor(item.sampling_params)
            self.admission.check(len(self._samples), sum(it.sampling_params.n for it in items))
            rids = [item.rid or uuid.uuid4().hex for item in items]
            for i, rid in enumerate(rids):
                self._check_rid_free(rid, rids[:i])
            size = sum(len(t) for item in items for t in _prompt_texts(item))
            size += sum(len(item.input_ids or ()) for item in items)
            size += REGEX_COST * sum(grammar_chars(item.sampling_params) for item in items)  # limits checked
            size += (1 << 20) * sum(len(item.image_data) for item in items)  # images: always off the loop
            built = await maybe_off_loop(size, self._build_all, items, rids, stream)
            requests = [(rid, req, expand_parallel_samples(req)) for rid, req in zip(rids, built)]
            # NOTE: checked again after the awaits above, and registered with no await in between.
            for i, rid in enumerate(rids):
                self._check_rid_free(rid, rids[:i])
            self.admission.check(len(self._samples), sum(len(samples) for _, _, samples in requests))
        except ApiError:
            await self._release_parent_pins(items)
            raise
        text_fn = self.token_text if logprob_text else None
        for rid, req, sample_reqs in requests:
            samples = [
                SampleState(group, len(group.samples) + j, s.rid, rid, len(req.input_ids), text_fn)
                for j, s in enumerate(sample_reqs)
            ]
            group.samples.extend(samples)
            self._samples.update((s.rid, s) for s in samples)
            self._by_rid[rid] = samples
        for _, _, sample_reqs in requests:
            for sample_req in sample_reqs:
                await self._push.send_pyobj(sample_req)
        for hook in self.submit_hooks:
            hook(items, rids)
        return group

    def _build_all(
        self, items: list[GenerateItem], rids: list[str], stream: bool
    ) -> list[TokenizedGenerateReq]:
        return [self.build_request(item, rid, stream) for item, rid in zip(items, rids)]

    def _check_rid_free(self, rid: str, earlier: list[str]) -> None:
        """400 when ``rid`` is not a valid client rid, is in flight, or is taken earlier in this batch.

        Only client rids are compared: samples run under ids no client rid can hold
        (``request_ids.sample_rid``), so ``grp-0`` is free while ``grp`` runs with ``n = 2``."""
        try:
            check_client_rid(rid)
        except InvalidRid as e:
            raise ApiError(str(e), param="rid") from e
        if rid in self._by_rid or rid in earlier:
            raise ApiError(f"a request with rid {rid!r} is already running", param="rid")

    async def _release_parent_pins(self, rejected: list[GenerateItem]) -> None:
        """Rejected children are never admitted: release their parents' pins (once per sample)."""
        for item in rejected:
            for _ in range(item.sampling_params.n if item.unpin_rids else 0):
                await self._push.send_pyobj(ReleasePinsReq(list(item.unpin_rids)))

    async def release_pins(self, remaining: dict[str, int]) -> None:
        """Release what is left of pinned contexts (a program that ended before all its children ran)."""
        for rid, count in remaining.items():
            for _ in range(count):
                if self.dead is None:
                    await self._push.send_pyobj(ReleasePinsReq([rid]))

    async def abort(self, group: ReqGroup) -> None:
        """Abort every unfinished sample of ``group`` (client gone), each by its exact id; the
        scheduler frees their KV."""
        for sample in group.samples:
            if not sample.finished and self.dead is None:
                await self._push.send_pyobj(AbortReq(sample.rid))

    async def abort_rid(self, rid: str) -> bool:
        """Abort a request by the rid its client gave, and exactly the samples it spawned (tracked
        in ``_by_rid``), or an embedding request; False when no request with that rid runs."""
        if rid in self.encodes:
            await self.send(AbortReq(rid))
            return True
        samples = self._by_rid.get(rid)
        if not samples:
            return False
        for sample in samples:
            if not sample.finished:
                await self._push.send_pyobj(AbortReq(sample.rid))
        return True

    async def abort_all(self) -> None:
        for rid in [*self._by_rid, *self.encodes]:
            await self.abort_rid(rid)

    async def send(self, msg: Any) -> None:
        """Send a message to the scheduler (sessions release their pins with ``ReleasePinsReq``)."""
        if self.dead is None:
            await self._push.send_pyobj(msg)

    # ---- control ---------------------------------------------------------------------------
    async def flush_cache(self, empty_cache: bool = False) -> FlushCacheOut:
        return await self.request_reply(FlushCacheReq(empty_cache=empty_cache), FlushCacheOut)

    async def get_stats(self, tree_nodes: int = 0) -> dict[str, Any]:
        """The scheduler's figures; with ``tree_nodes`` > 0 also ``tree`` and ``batch`` (the web UI)."""
        reply: StatsOut = await self.request_reply(GetStatsReq(tree_nodes), StatsOut)
        return reply.stats

    async def request_reply(self, msg: Any, reply_type: type) -> Any:
        """Send a control message to the scheduler and await its ``reply_type`` answer."""
        if self.dead is not None:
            raise ApiError(f"the server is shutting down: {self.dead}", 503)
        future = asyncio.get_running_loop().create_future()
        self._replies[reply_type].append(future)
        await self._push.send_pyobj(msg)
        try:
            return await asyncio.wait_for(future, REPLY_TIMEOUT_S)
        except asyncio.TimeoutError as e:
            raise ApiError(f"the scheduler did not answer within {REPLY_TIMEOUT_S:.0f} s", 503) from e

    # ---- outputs ---------------------------------------------------------------------------
    async def _recv_loop(self) -> None:
        while True:
            msg = await self._pull.recv_pyobj()
            if isinstance(msg, BatchTextOut):
                for out in msg.outs:
                    self._on_output(out)
            elif isinstance(msg, EncodeOut):
                self.encodes.resolve(msg)
            elif isinstance(msg, Heartbeat):
                self.last_heartbeat = time.monotonic()
            elif isinstance(msg, SchedulerDied):
                lines = msg.traceback.strip().splitlines()
                last_line = lines[-1] if lines else "unknown error"
                self.fail(f"the {msg.where} process died: {last_line}", msg.traceback)
            else:
                waiting = self._replies.get(type(msg))
                while waiting:
                    future = waiting.popleft()
                    if not future.done():
                        future.set_result(msg)
                        break

    def _on_recv_loop_done(self, task: asyncio.Task) -> None:
        if task.cancelled():  # the event loop is shutting down
            return
        error = task.exception()  # never None: the loop only ends by raising
        details = "".join(traceback.format_exception(error)) if error is not None else ""
        self.fail(f"the tokenizer manager's receive loop failed: {error!r}", details)

    def _on_output(self, out: ReqTextOut) -> None:
        sample = self._samples.get(out.rid)
        if sample is None:
            return  # a request that already failed
        sample.apply(out)
        if out.finished:
            if self.metrics is not None:
                self.metrics.on_finished(out, sample.group.created_at)
            for hook in self.finish_hooks:
                hook(sample, out)
            del self._samples[out.rid]
            self._forget_finished(sample)

    def _forget_finished(self, sample: SampleState) -> None:
        samples = self._by_rid.get(sample.request_rid, [])
        if all(s.finished for s in samples):
            self._by_rid.pop(sample.request_rid, None)

    def fail(self, summary: str, details: str = "") -> None:
        """A child process died or the receive loop failed: fail every pending request and ask the
        server to stop."""
        if self.dead is not None:
            return
        self.dead = summary
        error = ApiError(f"internal server error: {summary} (see the server log)", 500)
        self.fail_pending(error)
        self.encodes.fail_all(error)
        for waiting in self._replies.values():
            for future in waiting:
                if not future.done():
                    future.set_exception(error)
        self.on_fatal(f"{summary}\n{details}".strip())

    def fail_pending(self, error: ApiError) -> None:
        """End every request in flight with ``error`` (streams get it as an event, then [DONE])."""
        for sample in self._samples.values():
            sample.fail(error)
        self._samples.clear()
        self._by_rid.clear()


def _prompt_texts(item: GenerateItem) -> list[str]:
    """The texts ``tokenize`` encodes for ``item``."""
    if item.input_segments is not None:
        return [seg["text"] for seg in item.input_segments if "text" in seg]
    return [item.text] if item.input_ids is None and item.text else []
