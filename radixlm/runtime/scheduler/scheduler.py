"""The scheduler: one loop of receive -> schedule -> run -> process -> send.

The server's scheduler process and the in-process ``Engine`` drive the same object through
``handle(msg)`` and ``step()``; neither knows about sockets or threads.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any, Callable, Optional

import numpy as np
import torch

from radixlm.runtime.messages import (
    AbortReq,
    FlushCacheOut,
    FlushCacheReq,
    GetStatsReq,
    ReqTokenOut,
    StatsOut,
    TokenizedGenerateReq,
)
from radixlm.runtime.model_runner import ModelRunner
from radixlm.runtime.sampling.sampler import sample
from radixlm.runtime.scheduler.batch_builder import build_decode_batch, build_extend_batch
from radixlm.runtime.scheduler.cache_manager import CacheManager
from radixlm.runtime.scheduler.grammar_queue import GrammarQueue
from radixlm.runtime.scheduler.pins import PinTable
from radixlm.runtime.scheduler.jump_forward_step import JumpForwardStep
from radixlm.runtime.scheduler.prefill_planner import PrefillPlanner
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.stop_checker import StopChecker
from radixlm.runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)


def _abort_reason(message: str, status_code: int = 400) -> dict[str, Any]:
    return {"type": "abort", "message": message, "status_code": status_code}


class Scheduler:
    """Continuous batching over a radix-cached, paged KV pool. Single-threaded by design."""

    def __init__(self, server_args: ServerArgs, model_runner: Optional[ModelRunner] = None) -> None:
        self.args = server_args
        self.runner = model_runner or ModelRunner(server_args)
        loaded = self.runner.loaded
        self.tokenizer = loaded.tokenizer
        self.eos_token_ids = list(loaded.eos_token_ids)
        self.context_length = self.runner.context_length
        self.cache = CacheManager(self.runner.req_to_token_pool, self.runner.kv_pool, server_args.disable_radix_cache)
        self.planner = PrefillPlanner(server_args, self.cache)
        self.stop_checker = StopChecker(self.tokenizer, self.eos_token_ids, self.context_length)
        self.grammars = GrammarQueue(server_args, self.tokenizer, self.eos_token_ids, self.runner.vocab_size)
        self.jump_forward = (JumpForwardStep(self.tokenizer, self.cache, self.context_length)
                             if server_args.enable_jump_forward else None)

        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self.chunked: Optional[Req] = None
        self.pending_outputs: list[ReqTokenOut] = []
        self.pins = PinTable(self.cache, server_args.pin_timeout_s)
        self._seed_counter = server_args.seed
        self._stats = {"num_generated_tokens": 0, "num_prefill_tokens": 0, "num_retractions": 0,
                       "num_requests": 0, "num_steps": 0}
        self._throughput_window: deque[tuple[float, int]] = deque(maxlen=64)
        self._handlers: dict[type, Callable[[Any], Any]] = {
            TokenizedGenerateReq: self._on_generate,
            AbortReq: self._on_abort,
            FlushCacheReq: self._on_flush,
            GetStatsReq: self._on_stats,
        }

    # ---- messages ------------------------------------------------------------------------------
    def handle(self, msg: Any) -> Any:
        """Dispatch one incoming message; returns a reply for request/response messages."""
        handler = self._handlers.get(type(msg))
        if handler is None:
            raise TypeError(f"scheduler got an unknown message {type(msg).__name__}")
        return handler(msg)

    def _on_generate(self, msg: TokenizedGenerateReq) -> None:
        self._stats["num_requests"] += 1
        params = msg.sampling_params
        seed = params.seed if params.seed is not None else self._next_seed()
        input_ids = [int(t) for t in np.asarray(msg.input_ids).tolist()]
        req = Req(msg.rid, input_ids, params, msg.return_logprob, msg.logprob_start_len,
                  msg.top_logprobs_num, msg.stream, seed)
        req.pin_children = max(int(msg.pin_children), 0)
        req.unpin_rids = list(msg.unpin_rids)
        error = self._admission_error(req)
        if error is not None:
            self._finish(req, _abort_reason(error))
            return
        if req.grammar_key is not None:
            error = self.grammars.submit(req)
            if error is not None:
                self._finish(req, _abort_reason(error))
            return
        self.waiting.append(req)

    def _admission_error(self, req: Req) -> Optional[str]:
        n = len(req.origin_input_ids)
        if n == 0:
            return "the prompt is empty"
        vocab = self.runner.vocab_size
        if any(t < 0 or t >= vocab for t in req.origin_input_ids):
            return f"input_ids must be token ids in [0, {vocab})"
        if n >= self.context_length:
            return (f"the prompt has {n} tokens, but the model's context length is {self.context_length} "
                    f"(at least one token must be generated within it)")
        if req.sampling_params.n != 1:
            return "n > 1 must be expanded by the front end (expand_parallel_samples)"
        if req.logprob_start_len >= n:
            return f"logprob_start_len ({req.logprob_start_len}) must be smaller than the prompt length ({n})"
        if req.top_logprobs_num < 0:
            return "top_logprobs_num must be >= 0"
        need = n + min(req.sampling_params.max_new_tokens, self.context_length - n)
        if need > self.cache.capacity:
            return (f"the request needs up to {need} KV slots (prompt {n} + max_new_tokens), but the KV "
                    f"pool holds {self.cache.capacity}; lower max_new_tokens or raise kv_cache_gb")
        return None

    def _on_abort(self, msg: AbortReq) -> None:
        for queue in (self.waiting, self.grammars.pending):
            for req in list(queue):
                if req.rid == msg.rid or req.rid.startswith(msg.rid + "-"):
                    queue.remove(req)
                    self.grammars.discard(req)
                    self._finish(req, _abort_reason("aborted", 499))
        for req in self.running + ([self.chunked] if self.chunked else []):
            if req.rid == msg.rid or req.rid.startswith(msg.rid + "-"):
                req.to_abort = "aborted"

    def _on_flush(self, msg: FlushCacheReq) -> FlushCacheOut:
        if self.has_work():
            return FlushCacheOut(False, "cannot flush the cache while requests are running")
        self.pins.release_all()
        self.cache.flush()
        return FlushCacheOut(True, "")

    def _on_stats(self, msg: GetStatsReq) -> StatsOut:
        return StatsOut(self.stats())

    # ---- the loop body -------------------------------------------------------------------------
    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.chunked or self.grammars.pending or self.pending_outputs)

    @torch.inference_mode()
    def step(self) -> list[ReqTokenOut]:
        """Run one scheduling iteration; returns the outputs produced (possibly none).

        Runs in inference mode as a whole: the sampler edits the model's logits in place.
        """
        idle = not (self.waiting or self.running or self.chunked)
        self.waiting.extend(self.grammars.poll(self._finish_with_error, wait_s=0.005 if idle else 0.0))
        self._reap_aborted()
        batch = self.planner.plan(self.waiting, self.running, self.chunked) if (self.waiting or self.chunked) else []
        if batch:
            admitted = {id(r) for r in batch}
            self.waiting = [r for r in self.waiting if id(r) not in admitted]
            for req in batch:
                self.pins.on_admitted(req)
            self.chunked = None
            self._run_extend(batch)
        elif self.running:
            self._run_decode()
        elif self.waiting and not self.running:
            self._reject_unschedulable()
        self._stats["num_steps"] += 1
        self.pins.expire()
        if self.args.debug_invariants and not self.has_work():
            self.check_kv_integrity()
        out, self.pending_outputs = self.pending_outputs, []
        return out

    def _reap_aborted(self) -> None:
        for req in [r for r in self.running if r.to_abort is not None]:
            self.running.remove(req)
            self._finish(req, {"type": "abort", "message": req.to_abort, "status_code": 499})
        if self.chunked is not None and self.chunked.to_abort is not None:
            req, self.chunked = self.chunked, None
            self._finish(req, {"type": "abort", "message": req.to_abort, "status_code": 499})

    def _reject_unschedulable(self) -> None:
        # NOTE: nothing runs and nothing could be admitted. Pinned program contexts are only an
        # optimisation: drop them first and retry; otherwise the head request can never fit.
        if len(self.pins):
            self.pins.release_all()
            return
        req = self.waiting.pop(0)
        self._finish(req, _abort_reason("the request does not fit into the KV pool", 400))

    # ---- extend --------------------------------------------------------------------------------
    def _run_extend(self, batch: list[Req]) -> None:
        fb, layout = build_extend_batch(batch, self.runner)
        logits = self.runner.forward(fb)
        self._stats["num_prefill_tokens"] += int(fb.input_ids.numel())
        to_sample: list[Req] = []
        sample_rows: list[int] = []
        for i, req in enumerate(batch):
            req.kv_len += req.extend_len
            self._collect_input_logprobs(req, logits, layout.input_rows[i], fb)
            self.cache.commit_to_tree(req)
            if layout.sample_row[i] < 0:
                self.chunked = req
                continue
            req.input_logprobs_done = True
            if req.is_prefill_only:
                self._finish(req, {"type": "length", "length": 0})
                continue
            to_sample.append(req)
            sample_rows.append(layout.sample_row[i])
        if to_sample:
            rows = torch.tensor(sample_rows, dtype=torch.int64, device=logits.device)
            self._sample_and_advance(to_sample, logits[rows])
            for req in to_sample:
                if not req.finished:
                    self.running.append(req)

    def _collect_input_logprobs(self, req: Req, logits: torch.Tensor, rows: tuple[int, int, int], fb) -> None:
        if not req.needs_input_logprobs:
            return
        first, count, first_pos = rows
        if req.logprob_start_len == 0 and not req.input_token_logprobs and req.kv_len - req.extend_len == 0:
            req.input_token_logprobs.append((None, req.origin_input_ids[0]))
            req.input_top_logprobs.append(None)
        if count == 0:
            return
        logprobs = torch.log_softmax(logits[first : first + count].float(), dim=-1)
        targets = torch.tensor(req.origin_input_ids[first_pos + 1 : first_pos + 1 + count], dtype=torch.int64,
                               device=logprobs.device)
        chosen = logprobs.gather(1, targets[:, None]).squeeze(1).tolist()
        req.input_token_logprobs.extend(zip(chosen, targets.tolist()))
        if req.top_logprobs_num > 0:
            vals, ids = torch.topk(logprobs, req.top_logprobs_num, dim=-1)
            req.input_top_logprobs.extend(list(zip(v, t)) for v, t in zip(vals.tolist(), ids.tolist()))
        else:
            req.input_top_logprobs.extend([None] * count)

    # ---- decode --------------------------------------------------------------------------------
    def _run_decode(self) -> None:
        if self.jump_forward is not None and self.jump_forward.has_pending(self.running):
            self._run_jump_forward_extend()
            return
        slots = self.cache.alloc_decode_slot(self.running)
        while slots is None:
            self._retract_one()
            if not self.running:
                return
            slots = self.cache.alloc_decode_slot(self.running)
        batch = list(self.running)
        fb = build_decode_batch(batch, slots, self.runner)
        logits = self.runner.forward(fb)
        for req in batch:
            req.kv_len += 1
        self._sample_and_advance(batch, logits)
        self.running = [r for r in self.running if not r.finished]

    def _run_jump_forward_extend(self) -> None:
        """A decode step run as one extend: jumped requests compute all their forced tokens at once."""
        step = self.jump_forward.prepare(self.running, self.runner)
        while step is None:
            self._retract_one()
            if not self.running:
                return
            step = self.jump_forward.prepare(self.running, self.runner)
        batch = list(self.running)
        logits = self.runner.forward(step.batch)
        for req in batch:
            req.kv_len += req.extend_len
        self._sample_and_advance(batch, logits[self.jump_forward.verify(step, logits)])
        self.running = [r for r in self.running if not r.finished]

    def _retract_one(self) -> None:
        """Free KV under pressure: the request with the fewest generated tokens goes back to the queue.

        Its computed tokens go into the tree (so the recompute mostly hits the cache) and its
        generation resumes from where it was; greedy output is unchanged.
        """
        victim = min(self.running, key=lambda r: (len(r.output_ids), -self.running.index(r)))
        self.running.remove(victim)
        self.cache.release(victim)
        victim.num_retractions += 1
        self._stats["num_retractions"] += 1
        self.waiting.insert(0, victim)
        logger.info("retracted %s under KV pressure", victim.rid)

    # ---- sampling and outputs ------------------------------------------------------------------
    def _sample_and_advance(self, reqs: list[Req], logits: torch.Tensor) -> None:
        self.grammars.apply_masks(reqs, logits)
        result = sample(logits, reqs, self.eos_token_ids)
        now = time.monotonic()
        self._throughput_window.append((now, len(reqs)))
        self._stats["num_generated_tokens"] += len(reqs)
        for i, req in enumerate(reqs):
            token = result.next_token_ids[i]
            req.output_ids.append(token)
            if req.return_logprob:
                req.output_token_logprobs.append((result.logprobs[i], token))
                req.output_top_logprobs.append(result.top_logprobs[i] or [])
            if req.grammar is not None and not req.grammar.accept_token(token):
                if token not in self.eos_token_ids:
                    self._finish(req, _abort_reason(f"grammar rejected token {token}", 500))
                    continue
            reason = self.stop_checker.check(req)
            if reason is None and self._may_jump() and self.jump_forward.apply(req):
                reason = self.stop_checker.check(req)
            if reason is not None:
                self._finish(req, reason)
            elif req.stream:
                self._emit(req)

    def _may_jump(self) -> bool:
        if self.jump_forward is None:
            return False
        limit = self.args.jump_forward_max_batch
        if limit is None:
            limit = 8 if self.runner.device.type == "cpu" else 1 << 30
        return len(self.running) <= limit

    def _finish(self, req: Req, reason: dict[str, Any]) -> None:
        req.finish_reason = reason
        if req.pin_children and reason.get("type") != "abort":
            self.pins.add(req)
        self.pins.on_admitted(req)  # a child rejected before admission must not hold its parent
        self.cache.release(req)
        self._emit(req)

    def _finish_with_error(self, req: Req, message: str) -> None:
        self._finish(req, _abort_reason(message))

    def _emit(self, req: Req) -> None:
        # NOTE: unverified jump-forward tokens are held back until verified (or the request finished).
        end = req.jump_draft.start if req.jump_draft is not None and not req.finished else len(req.output_ids)
        new_ids = req.output_ids[req.sent_output_len : end]
        p = req.sampling_params
        out = ReqTokenOut(
            rid=req.rid,
            new_token_ids=np.asarray(new_ids, dtype=np.int32),
            finished=req.finished,
            finish_reason=req.finish_reason,
            prompt_tokens=len(req.origin_input_ids),
            completion_tokens=len(req.output_ids),
            cached_tokens=req.cached_tokens,
            skip_special_tokens=p.skip_special_tokens,
            spaces_between_special_tokens=p.spaces_between_special_tokens,
            stop_strings=list(p.stop),
            no_stop_trim=p.no_stop_trim,
        )
        if req.return_logprob:
            if not req.sent_input_logprobs and req.input_logprobs_done:
                req.sent_input_logprobs = True
                out.input_token_logprobs = req.input_token_logprobs
                out.input_top_logprobs = req.input_top_logprobs if req.top_logprobs_num else None
            lo = req.sent_logprob_len
            out.output_token_logprobs = req.output_token_logprobs[lo:]
            out.output_top_logprobs = req.output_top_logprobs[lo:] if req.top_logprobs_num else None
            req.sent_logprob_len = len(req.output_token_logprobs)
        req.sent_output_len = end
        self.pending_outputs.append(out)

    # ---- introspection -------------------------------------------------------------------------
    def _next_seed(self) -> int:
        self._seed_counter += 1
        return (self._seed_counter * 2654435761) % (2**31)

    def stats(self) -> dict[str, Any]:
        window = list(self._throughput_window)
        tps = 0.0
        if len(window) >= 2 and window[-1][0] > window[0][0]:
            tps = sum(n for _, n in window[1:]) / (window[-1][0] - window[0][0])
        return {
            **self.cache.stats(),
            "num_running": len(self.running) + (1 if self.chunked else 0),
            "num_queued": len(self.waiting),
            "num_grammar_queue": len(self.grammars.pending),
            "num_pinned_contexts": len(self.pins),
            "gen_throughput": tps,
            **self._stats,
        }

    def check_kv_integrity(self) -> None:
        """Assert the KV ownership invariant (call when idle, or any time between steps)."""
        running = self.running + ([self.chunked] if self.chunked else [])
        self.cache.check_integrity(running)

    def model_info(self) -> dict[str, Any]:
        loaded = self.runner.loaded
        return {
            "model_path": loaded.model_path,
            "tokenizer_path": loaded.tokenizer_path,
            "is_generation": True,
            "chat_template": loaded.chat_template,
            "context_length": self.context_length,
            "vocab_size": self.runner.vocab_size,
            "eos_token_ids": self.eos_token_ids,
            "architecture": loaded.architecture,
            "device": str(self.runner.device),
            "dtype": str(self.runner.dtype).replace("torch.", ""),
            "kv_slots": self.cache.capacity,
        }

    def shutdown(self) -> None:
        self.grammars.shutdown()
