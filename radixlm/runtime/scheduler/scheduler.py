"""The scheduler: one loop of receive -> schedule -> forward -> process -> send.

The server's scheduler process and the in-process ``Engine`` drive the same object through
``handle(msg)`` and ``step()``; neither knows about sockets or threads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from radixlm.runtime.executor.model_runner import ModelRunner
from radixlm.runtime.kv_tiers.factory import create_disk_store, create_tiered_cache
from radixlm.runtime.lora.scheduling import bind_adapter, change_adapters
from radixlm.runtime.messages import (
    CLIENT_ABORT_STATUS,
    AbortReq,
    EncodeReq,
    FlushCacheReq,
    GetStatsReq,
    LoRAAdapterReq,
    ProfileReq,
    ReleasePinsReq,
    ReqTokenOut,
    TokenizedGenerateReq,
    UpdateWeightsReq,
)
from radixlm.runtime.pooling.encode_step import EncodeStep
from radixlm.runtime.scheduler.batch_builder import (
    build_decode_batch,
    build_extend_batch,
    build_mixed_chunk_batch,
)
from radixlm.runtime.scheduler.cache_manager import CacheManager
from radixlm.runtime.scheduler.finish_reason import FinishAbort
from radixlm.runtime.scheduler.forward_failures import ForwardFailures
from radixlm.runtime.scheduler.grammar_queue import GrammarQueue
from radixlm.runtime.scheduler.jump_forward_step import JumpForwardStep, resolve_max_batch, withdraw_draft
from radixlm.runtime.scheduler.ops_control import profile, update_weights
from radixlm.runtime.scheduler.pins import PinTable
from radixlm.runtime.scheduler.prefill_planner import PrefillPlanner
from radixlm.runtime.scheduler.priority import AgingClock, preemption_victim, retraction_victim
from radixlm.runtime.scheduler.queue_timeout import expire_grammar_waits, expire_waiting
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.request_index import RequestIndex
from radixlm.runtime.scheduler.scheduled_batch import ScheduledBatch
from radixlm.runtime.scheduler.scheduler_views import SchedulerViews
from radixlm.runtime.scheduler.spec_verify import build_verify_batch
from radixlm.runtime.scheduler.step_counters import StepCounters
from radixlm.runtime.scheduler.step_profiler import StepProfiler
from radixlm.runtime.scheduler.stop_checker import StopChecker
from radixlm.runtime.scheduler.token_processor import TokenProcessor
from radixlm.runtime.server_args import ServerArgs
from radixlm.runtime.speculative.factory import create_speculator

logger = logging.getLogger(__name__)


class Scheduler(SchedulerViews):
    """Continuous batching over a radix-cached, paged KV pool. Single-threaded by design."""

    def __init__(self, server_args: ServerArgs, model_runner: ModelRunner | None = None) -> None:
        self.args = server_args
        self.runner = model_runner or ModelRunner(server_args)
        loaded = self.runner.loaded
        self.tokenizer = loaded.tokenizer
        self.eos_token_ids = list(loaded.eos_token_ids)
        self.context_length = self.runner.context_length
        tree = None
        if server_args.enable_hierarchical_cache and not server_args.disable_radix_cache:
            tree = create_tiered_cache(server_args, self.runner.kv_pool)
        disk = None
        if not server_args.disable_radix_cache:
            disk = create_disk_store(server_args, self.runner.kv_pool, self.runner.loaded.model_path)
        self.cache = CacheManager(
            self.runner.req_to_token_pool, self.runner.kv_pool, server_args.disable_radix_cache, tree, disk
        )
        self.planner = PrefillPlanner(server_args, self.cache)
        self.stop_checker = StopChecker(self.tokenizer, self.eos_token_ids, self.context_length)
        self.grammars = GrammarQueue(server_args, self.tokenizer, self.eos_token_ids, self.runner.vocab_size)
        self.jump_forward: JumpForwardStep | None = None
        if server_args.enable_jump_forward:
            max_batch = resolve_max_batch(server_args.jump_forward_max_batch, self.runner.device)
            self.jump_forward = JumpForwardStep(self.tokenizer, self.cache, self.context_length, max_batch)
        self.speculator = create_speculator(server_args, self.runner, self.cache, self.context_length)

        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self.chunked: Req | None = None
        self.pending_outputs: list[ReqTokenOut] = []  # appended to by TokenProcessor, emptied by step()
        self.requests = RequestIndex()
        # under tensor parallelism one failed forward already leaves the ranks' collectives out of step
        limit = 1 if server_args.tp_size > 1 else server_args.max_forward_failures
        self.forward_failures = ForwardFailures(limit)
        self.pins = PinTable(self.cache, server_args.pin_timeout_s)
        self._seed_counter = server_args.seed
        self.counters = StepCounters()
        self.profiler = StepProfiler(server_args.profile_dir)
        self.hold_admission_until = 0.0  # a weight update waits for the running requests (ops_control.py)
        self.aging = AgingClock()
        self.tokens = TokenProcessor(
            self.cache,
            self.stop_checker,
            self.grammars,
            self.pins,
            self.requests,
            self.pending_outputs,
            self.counters,
            self.eos_token_ids,
            self.jump_forward,
            self.speculator,
        )
        self.encoder = EncodeStep(self.runner, self.cache, server_args.max_prefill_tokens, self.requests)
        self._handlers: dict[type, Callable[[Any], Any]] = {
            TokenizedGenerateReq: self._on_generate,
            EncodeReq: self._on_encode,
            LoRAAdapterReq: lambda msg: change_adapters(self.runner.lora, msg),
            AbortReq: self._on_abort,
            FlushCacheReq: self._on_flush,
            GetStatsReq: self._on_stats,
            ReleasePinsReq: self._on_release_pins,
            UpdateWeightsReq: lambda msg: update_weights(self, msg),
            ProfileReq: lambda msg: profile(self.profiler, msg),
        }

    # ---- messages ------------------------------------------------------------------------------
    def handle(self, msg: Any) -> Any:
        """Dispatch one incoming message; returns a reply for request/response messages."""
        handler = self._handlers.get(type(msg))
        if handler is None:
            raise TypeError(f"scheduler got an unknown message {type(msg).__name__}")
        return handler(msg)

    def _on_generate(self, msg: TokenizedGenerateReq) -> None:
        """Take in a request. An error doing so fails this request alone (a 500 naming it): it leaves
        the queues and the request index, and its parents' pins are released; the loop goes on."""
        self.counters.num_requests += 1
        req: Req | None = None
        try:
            req = self._new_req(msg)
            self.requests.add(req)
            self._enqueue(req)
        except Exception as exc:  # noqa: BLE001 - any error of one request fails only that request
            if req is not None:
                self._unqueue(req)
            self.tokens.fail_intake(msg, req, exc)

    def _new_req(self, msg: TokenizedGenerateReq) -> Req:
        params = msg.sampling_params
        seed = params.seed if params.seed is not None else self._next_seed()
        input_ids = np.asarray(msg.input_ids).tolist()
        req = Req(
            msg.rid,
            input_ids,
            params,
            msg.return_logprob,
            msg.logprob_start_len,
            msg.top_logprobs_num,
            msg.stream,
            seed,
        )
        req.pin_children = max(int(msg.pin_children), 0)
        req.unpin_rids = list(msg.unpin_rids)
        req.pin_timeout_s = msg.pin_timeout_s
        req.group_rid = msg.group_rid
        req.priority = int(msg.priority or 0)
        if msg.mm_inputs is not None and msg.mm_inputs.items:
            both_ways = getattr(self.runner.model, "bidirectional_images", False)
            req.attach_images(msg.mm_inputs, self.runner.vocab_size, both_ways)
        req.lora_name = msg.lora_name
        return req

    def _enqueue(self, req: Req) -> None:
        """Into the admission queue, or the grammar queue until its grammar is compiled; rejected
        (400) when it can never fit or its grammar is invalid."""
        error = self._admission_error(req) or bind_adapter(req, self.runner.lora)
        if error is None and req.grammar_key is not None:
            error = self.grammars.submit(req)  # on success it waits there
        elif error is None:
            self.waiting.append(req)
            self.cache.prefetch(req)
        if error is not None:
            self.tokens.reject(req, error)

    def _unqueue(self, req: Req) -> bool:
        """Take ``req`` out of the queue it waits in (admission or its grammar); False if in none."""
        queue = next((q for q in (self.waiting, self.grammars.pending) if any(r is req for r in q)), None)
        self.grammars.discard(req)
        if queue is None:
            return False
        queue.remove(req)
        return True

    def _admission_error(self, req: Req) -> str | None:
        """What only the scheduler can check: the KV pool's size. The front ends validated the rest
        (``request_validation.validate_request``)."""
        n = len(req.origin_input_ids)
        need = n + min(req.sampling_params.max_new_tokens, self.context_length - n)
        if need > self.cache.capacity:
            return (
                f"the request needs up to {need} KV slots (prompt {n} + max_new_tokens), but the KV "
                f"pool holds {self.cache.capacity}; lower max_new_tokens or raise kv_cache_gb"
            )
        return None

    def _on_abort(self, msg: AbortReq) -> None:
        """Abort the request whose rid is exactly ``msg.rid`` and the samples it spawned."""
        for req in self.requests.named(msg.rid):
            if self._unqueue(req):
                self.tokens.finish(req, FinishAbort("aborted", CLIENT_ABORT_STATUS))
            else:
                req.to_abort = "aborted"  # running or mid-prefill: reaped at the start of the next step
        self.encoder.abort(msg.rid)  # an encoder's queued job (a decoder's sequences are named above)

    def _on_encode(self, msg: EncodeReq) -> None:
        """Embed or score (prefill only): a decoder's sequences join the admission queue; the answer
        comes out of ``take_replies`` after the step that completes it."""
        self.counters.num_requests += 1
        self.waiting.extend(self.encoder.submit(msg))

    def _on_release_pins(self, msg: ReleasePinsReq) -> None:
        self.pins.release_children(msg.unpin_rids)

    # ---- the loop body -------------------------------------------------------------------------
    def has_work(self) -> bool:
        busy = self.waiting or self.running or self.chunked or self.grammars.pending
        return bool(busy or self.pending_outputs or self.encoder.has_work())

    @torch.inference_mode()
    def step(self) -> list[ReqTokenOut]:
        """Run one scheduling iteration; returns the outputs produced (possibly none).

        Runs in inference mode as a whole: the sampler edits the model's logits in place.
        """
        started = time.perf_counter()
        idle = not (self.waiting or self.running or self.chunked or self.encoder.has_work())
        self.waiting.extend(self.grammars.poll(self.tokens.reject, wait_s=0.005 if idle else 0.0))
        self._reap_aborted()
        expire_waiting(self.waiting, self.args.queue_timeout, self.tokens.finish)
        expire_grammar_waits(self.grammars, self.args.queue_timeout, self.tokens.finish)
        self.aging.tick(self.waiting, self.running, self.args)
        self.encoder.run_encoder()  # an encoder's queued requests, batched together
        batch = self._schedule()
        if batch is not None:
            self._forward_and_process(batch)
            if self.speculator is not None:
                self.speculator.on_step(batch, time.perf_counter() - started)
            if self.profiler.active:
                self.profiler.on_forward_step()
        self.counters.num_steps += 1
        self.pins.expire()
        if self.args.debug_invariants and not self.has_work():
            self.check_kv_integrity()
        out = list(self.pending_outputs)
        self.pending_outputs.clear()  # the list TokenProcessor appends to
        return out

    def _forward_and_process(self, batch: ScheduledBatch) -> None:
        try:
            with self.profiler.span(f"radixlm.forward.{batch.forward_batch.mode.name.lower()}"):
                logits = self.encoder.forward(batch)  # runner.forward, pooling embedding sequences
        except Exception as exc:  # batch-wide; repeated: BrokenRuntime (forward_failures.py)
            self.forward_failures.on_failure(exc)
            self.tokens.fail_batch(batch, exc)
            self.running = [r for r in self.running if not r.finished]
            return
        self.forward_failures.on_success()
        self.running, chunked = self.tokens.process(batch, logits, self.running)
        if chunked is not None:  # an extend is scheduled only once no chunked request is left
            self.chunked = chunked

    def _reap_aborted(self) -> None:
        reaped = [r for r in self.running if r.to_abort is not None]
        self.running = [r for r in self.running if r.to_abort is None]
        if self.chunked is not None and self.chunked.to_abort is not None:
            reaped.append(self.chunked)
            self.chunked = None
        for req in reaped:
            assert req.to_abort is not None
            self.tokens.finish(req, FinishAbort(req.to_abort, CLIENT_ABORT_STATUS))

    # ---- scheduling ----------------------------------------------------------------------------
    def _schedule(self) -> ScheduledBatch | None:
        """This step's batch, its KV slots allocated; None when nothing can run.

        Newly admitted prompts (the planner) go first; else the running requests decode, as one
        mixed step when some jumped forward, retracting requests while the KV pool is short. A
        waiting request that cannot be admitted while nothing runs is rejected here.
        """
        # NOTE: the rejection is decided here, not after: when retraction empties the running batch
        # its requests wait for the next step's plan, which can admit them again.
        held = self.chunked is None and time.monotonic() < self.hold_admission_until
        batch = None if held else self._schedule_extend()
        if batch is None and self.running:
            batch = self._schedule_running()
        elif batch is None and self.waiting and not held:
            self._reject_unschedulable()
        return batch

    def _schedule_extend(self) -> ScheduledBatch | None:
        """Admitted prompts (prefill-first), or with ``enable_mixed_chunk`` a chunk of at most
        ``mixed_chunk_size`` prompt tokens plus one decode token of every running request."""
        if not (self.waiting or self.chunked):
            return None
        if self.chunked is None and len(self.running) >= self.args.max_running_requests:
            victim = preemption_victim(self.waiting, self.running, self.args)
            if victim is not None:
                self._retract(victim, "for a higher priority")
        mix = (
            self.args.enable_mixed_chunk
            and bool(self.running)
            and not (self.jump_forward is not None and self.jump_forward.has_pending(self.running))
        )
        reqs = self.planner.plan(
            self.waiting, self.running, self.chunked, max_tokens=self.args.mixed_chunk_size if mix else None
        )
        if not reqs:
            return None
        admitted = {id(r) for r in reqs}
        self.waiting = [r for r in self.waiting if id(r) not in admitted]
        for req in reqs:
            self.pins.on_admitted(req)
        self.chunked = None
        if mix and self.cache.alloc_decode_slot(self.running) is not None:
            return build_mixed_chunk_batch(reqs, self.running, self.runner)
        return build_extend_batch(reqs, self.runner)

    def _schedule_running(self) -> ScheduledBatch | None:
        jumped = self.jump_forward is not None and self.jump_forward.has_pending(self.running)
        if not jumped and self.speculator is not None:
            drafts = self.speculator.drafts(self.running)
            if drafts is not None:
                # NOTE: without room for the drafts the step decodes plainly (and retracts if needed)
                batch = build_verify_batch(self.running, drafts, self.cache, self.runner)
                if batch is not None:
                    return batch
        build = self._mixed_batch if jumped else self._decode_batch
        while (batch := build()) is None:
            self._retract_one()
            if not self.running:
                return None
        return batch

    def _decode_batch(self) -> ScheduledBatch | None:
        slots = self.cache.alloc_decode_slot(self.running)
        return None if slots is None else build_decode_batch(self.running, slots, self.runner)

    def _mixed_batch(self) -> ScheduledBatch | None:
        assert self.jump_forward is not None, "only a jump leaves more than one token to compute"
        return self.jump_forward.prepare(self.running, self.runner)

    def _retract_one(self) -> None:
        """Free KV under pressure: the lowest priority (with priority scheduling), then the request
        with the fewest generated tokens goes back to the queue.

        Its computed tokens go into the tree (so the recompute mostly hits the cache) and its
        generation resumes from where it was, less an unverified jump-forward draft; greedy output
        is unchanged.
        """
        self._retract(retraction_victim(self.running, self.args), "under KV pressure")

    def _retract(self, victim: Req, why: str) -> None:
        self.running.remove(victim)
        withdraw_draft(victim)
        self.cache.release(victim)
        if self.speculator is not None:
            self.speculator.release(victim)
        victim.num_retractions += 1
        self.counters.num_retractions += 1
        self.waiting.insert(0, victim)
        logger.info("retracted %s %s", victim.rid, why)

    def _reject_unschedulable(self) -> None:
        # NOTE: nothing runs and nothing could be admitted. Pinned program contexts are only an
        # optimisation: drop them first and retry; otherwise the head request can never fit.
        if len(self.pins):
            self.pins.release_all()
            return
        req = self.waiting.pop(0)
        self.tokens.reject(req, "the request does not fit into the KV pool")

    # ---- introspection -------------------------------------------------------------------------
    def _next_seed(self) -> int:
        self._seed_counter += 1
        return (self._seed_counter * 2654435761) % (2**31)

    def shutdown(self) -> None:
        self.cache.close()
        self.grammars.shutdown()
        if self.speculator is not None:
            self.speculator.close()
        self.runner.close()
