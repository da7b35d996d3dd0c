"""After the forward: a step's tokens join the KV and the requests sample, stop, stream or finish; and
every way a request ends.

Failures stay as small as their cause:

- Sampling-side failures belong to one request: its grammar matcher (``fill_bitmask``,
  ``accept_token``), its penalties or ``logit_bias``, its draw, or logits that are not finite in its
  row only. That request ends with a 500 naming the problem; its KV and matcher are released and
  the rest of the batch samples as if it were not there (each row's processing touches only its row).
- A forward pass that raises is batch-wide (``fail_batch``): no row's logits can be trusted and no
  request can be blamed. The batch's requests end with a 500, the step's freshly taken KV slots
  (which may hold partial writes) go back to the free pool without entering the prefix cache, and
  the loop goes on: requests outside the batch, the cache and the pools are intact. Repeated, it is
  a broken runtime (``forward_failures.py``).
- An error while the scheduler takes in a request fails that request alone (``fail_intake``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import NamedTuple

import torch

from radixlm.runtime.messages import ReqTokenOut, TokenizedGenerateReq
from radixlm.runtime.sampling.custom_logit_processor import apply_custom_processors
from radixlm.runtime.sampling.sampler import SampleOutput, sample
from radixlm.runtime.sampling.sequence import SamplingSequence
from radixlm.runtime.scheduler.cache_manager import CacheManager
from radixlm.runtime.scheduler.finish_reason import FinishAbort, FinishLength, FinishReason
from radixlm.runtime.scheduler.grammar_queue import GrammarQueue
from radixlm.runtime.scheduler.input_logprobs import collect_input_logprobs, record_next_token_logprobs
from radixlm.runtime.scheduler.jump_forward_step import JumpForwardStep
from radixlm.runtime.scheduler.pins import PinTable
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.request_index import RequestIndex
from radixlm.runtime.scheduler.scheduled_batch import BatchKind, ScheduledBatch
from radixlm.runtime.scheduler.spec_greedy import greedy_rows
from radixlm.runtime.scheduler.spec_verify import verify_drafts
from radixlm.runtime.scheduler.step_counters import StepCounters
from radixlm.runtime.scheduler.stop_checker import StopChecker
from radixlm.runtime.scheduler.token_output import rejected_output, take_token_output
from radixlm.runtime.speculative.speculator import Speculator

logger = logging.getLogger(__name__)

FAILED_STATUS = 500


class Processed(NamedTuple):
    """The running requests after a step, and the request of its batch whose prompt continues in a
    next chunk (None when none did)."""

    running: list[Req]
    chunked: Req | None


AfterForward = Callable[[ScheduledBatch, torch.Tensor, list[Req]], Processed]


class TokenProcessor:
    """Turns a step's logits into tokens, stops and outputs; finishes and fails requests.

    Finishing a request is one path (``finish``): it leaves the request index, pins its context
    for program children, unpins its parents, releases its KV and queues its last output into
    ``outputs``, which the scheduler hands out after each step.
    """

    def __init__(
        self,
        cache: CacheManager,
        stop_checker: StopChecker,
        grammars: GrammarQueue,
        pins: PinTable,
        requests: RequestIndex,
        outputs: list[ReqTokenOut],
        counters: StepCounters,
        eos_token_ids: list[int],
        jump_forward: JumpForwardStep | None,
        speculator: Speculator | None = None,
    ) -> None:
        self.cache = cache
        self.stop_checker = stop_checker
        self.grammars = grammars
        self.pins = pins
        self.requests = requests
        self.outputs = outputs
        self.counters = counters
        self.eos_token_ids = eos_token_ids
        self.jump_forward = jump_forward
        self.speculator = speculator
        self._after: dict[BatchKind, AfterForward] = {
            BatchKind.EXTEND: self._after_extend,
            BatchKind.MIXED_CHUNK: self._after_mixed_chunk,
            BatchKind.MIXED: self._after_mixed,
            BatchKind.DECODE: self._after_decode,
            BatchKind.VERIFY: self._after_verify,
        }

    # ---- after the forward ---------------------------------------------------------------------
    def process(self, batch: ScheduledBatch, logits: torch.Tensor, running: list[Req]) -> Processed:
        """The computed tokens join the KV, then each request that completed its tokens samples the
        next one, is checked for a stop, and streams or finishes. ``running`` is the running batch
        the step was scheduled with."""
        for req in batch.reqs:
            req.kv_len += req.extend_len
        return self._after[batch.kind](batch, logits, running)

    def _after_extend(self, batch: ScheduledBatch, logits: torch.Tensor, running: list[Req]) -> Processed:
        self.counters.num_prefill_tokens += batch.num_input_tokens
        started, rows, chunked = self._end_prompts(batch, logits, len(batch.reqs))
        self._sample(started, logits, rows, len(running))
        return Processed(running + [r for r in started if not r.finished], chunked)

    def _after_mixed_chunk(
        self, batch: ScheduledBatch, logits: torch.Tensor, running: list[Req]
    ) -> Processed:
        """Prompt chunks first, then one decode token of every running request (which only samples)."""
        num_prompts = batch.num_prefill_reqs
        self.counters.num_prefill_tokens += batch.num_input_tokens - (len(batch.reqs) - num_prompts)
        started, rows, chunked = self._end_prompts(batch, logits, num_prompts)
        decoding = batch.reqs[num_prompts:]
        self._sample(started + decoding, logits, rows + batch.sample_rows[num_prompts:], len(running))
        return Processed([r for r in running + started if not r.finished], chunked)

    def _after_mixed(self, batch: ScheduledBatch, logits: torch.Tensor, running: list[Req]) -> Processed:
        assert self.jump_forward is not None, "a mixed step without jump-forward"
        to_sample, rows = self.jump_forward.verify(batch, logits, self.fail)
        self._sample(to_sample, logits, rows, len(running))
        return Processed([r for r in running if not r.finished], None)

    def _after_decode(self, batch: ScheduledBatch, logits: torch.Tensor, running: list[Req]) -> Processed:
        self._sample(batch.reqs, logits, None, len(running))  # every row in order: no copy
        return Processed([r for r in running if not r.finished], None)

    def _after_verify(self, batch: ScheduledBatch, logits: torch.Tensor, running: list[Req]) -> Processed:
        """Speculative drafts (``spec_verify.py``): sampled round by round; a streaming request sends
        its accepted run as one output."""
        assert self.speculator is not None, "a verify step without speculation"

        def sample_round(reqs: list[Req], rows: list[int]) -> None:
            self._sample(reqs, logits, rows, len(running), speculating=True)

        def advance_round(reqs: list[Req], tokens: list[int]) -> None:  # greedy_rows' tokens
            self.counters.on_generated(len(reqs))
            for req, token in zip(reqs, tokens):
                self._advance_guarded(req, SampleOutput([token], [None], [None]), 0, None, stream=False)

        known = greedy_rows(batch, logits)
        verify_drafts(batch, self.cache, self.speculator, sample_round, known, advance_round)
        for req in batch.reqs:
            if req.stream and not req.finished:
                self.outputs.append(take_token_output(req))
        return Processed([r for r in running if not r.finished], None)

    def _end_prompts(
        self, batch: ScheduledBatch, logits: torch.Tensor, num_prompts: int
    ) -> tuple[list[Req], list[int], Req | None]:
        """Input logprobs and the tree commit of the batch's first ``num_prompts`` (extended) requests;
        returns those that sample with their logits rows, and the one whose prompt goes on in a
        next chunk. A prefill-only request finishes here."""
        started: list[Req] = []
        rows: list[int] = []
        chunked: Req | None = None
        for req, row, input_rows in zip(
            batch.reqs[:num_prompts], batch.sample_rows, batch.input_logprob_rows
        ):
            collect_input_logprobs(req, logits, input_rows)
            self.cache.commit_to_tree(req)
            if row < 0:
                chunked = req
                continue
            req.logprobs.input_done = True
            if req.is_prefill_only:
                if req.return_logprob:
                    record_next_token_logprobs(req, logits[row])
                self.finish(req, FinishLength(0))
                continue
            started.append(req)
            rows.append(row)
        return started, rows, chunked

    def _sample(
        self,
        reqs: list[Req],
        logits: torch.Tensor,
        rows: list[int] | None,
        running_size: int,
        speculating: bool = False,
    ) -> None:
        """Sample each request's next token (from ``logits[rows]``, or every row in order when
        ``rows`` is None) and advance it. ``speculating``: a verify round, which neither jumps
        forward nor streams (the caller streams the accepted run once). A failure that belongs to
        one request (its grammar matcher, penalties, logit_bias, non-finite logits, ``accept_token``)
        fails that request alone."""
        if not reqs:
            return
        if rows is not None:
            logits = logits[torch.tensor(rows, device=logits.device)]
        seqs: list[SamplingSequence] = list(reqs)
        errors = apply_custom_processors(logits, seqs)  # client code: before the grammar mask
        errors = {**self.grammars.apply_masks(reqs, logits), **errors}
        result = sample(logits, seqs, self.eos_token_ids, errors=errors)
        self.counters.on_generated(len(reqs) - len(result.errors))
        jump = self.jump_forward
        if jump is not None and (speculating or not jump.allows(running_size)):
            jump = None
        for i, req in enumerate(reqs):
            if i in result.errors:
                self.fail(req, f"sampling failed for this request: {result.errors[i]}")
                continue
            self._advance_guarded(req, result, i, jump, stream=req.stream and not speculating)

    def _advance_guarded(
        self, req: Req, result: SampleOutput, i: int, jump: JumpForwardStep | None, stream: bool
    ) -> None:
        try:
            self._advance(req, result, i, jump, stream)
        except Exception as e:  # noqa: BLE001 - e.g. its grammar matcher's accept_token raising
            logger.exception("request %s failed after sampling", req.rid)
            self.fail(req, f"advancing this request failed: {type(e).__name__}: {e}")

    def _advance(
        self, req: Req, result: SampleOutput, i: int, jump: JumpForwardStep | None, stream: bool
    ) -> None:
        token = result.next_token_ids[i]
        req.output_ids.append(token)
        if req.first_token_at is None:
            req.first_token_at = time.perf_counter()
        if req.return_logprob:
            logprob = result.logprobs[i]
            assert logprob is not None, "the sampler gives a logprob to every row that asks"
            req.logprobs.output_tokens.append((logprob, token))
            req.logprobs.output_top.append(result.top_logprobs[i] or [])
        if req.grammar is not None and not req.grammar.accept_token(token):
            if token not in self.eos_token_ids:
                broken = req.grammar.broken_reason()
                if broken is not None:  # the client's grammar cannot be satisfied (e.g. root ::= "a" root)
                    self.finish(req, FinishAbort(f"the grammar cannot be completed: {broken}", 400))
                else:
                    self.finish(req, FinishAbort(f"grammar rejected token {token}", FAILED_STATUS))
                return
        reason = self.stop_checker.check(req)
        if reason is None and jump is not None and jump.apply(req):
            reason = self.stop_checker.check(req)
        if reason is not None:
            self.finish(req, reason)
        elif stream:
            self.outputs.append(take_token_output(req))

    # ---- endings -------------------------------------------------------------------------------
    def finish(self, req: Req, reason: FinishReason) -> None:
        """The one way a request ends (it holds KV, or never got any)."""
        req.finish_reason = reason
        self.requests.forget(req)
        if req.pin_children and not isinstance(reason, FinishAbort):
            self.pins.add(req)
        self.pins.on_admitted(req)  # a child rejected before admission must not hold its parent
        self.cache.release(req)
        if self.speculator is not None:
            self.speculator.release(req)
        if req.pool is not None:  # an embedding sequence answers through its EncodeReq's job
            req.pool.finished(reason)
            return
        self.outputs.append(take_token_output(req))

    def reject(self, req: Req, message: str) -> None:
        """End ``req`` with a 400 naming ``message`` (its grammar failed to compile, it cannot fit)."""
        self.finish(req, FinishAbort(message))

    def fail(self, req: Req, message: str) -> None:
        """End ``req`` with a 500 naming ``message``; its KV and grammar matcher are released."""
        req.grammar = None
        self.finish(req, FinishAbort(message, FAILED_STATUS))

    def fail_batch(self, batch: ScheduledBatch, exc: BaseException) -> None:
        """End every request of ``batch`` (whose forward raised ``exc``) with a 500, releasing its KV:
        the step's slots are freed unwritten-to-the-tree, what was computed before stays cached."""
        logger.error(
            "the forward pass of a %s batch of %d requests failed: %r", batch.kind.name, len(batch.reqs), exc
        )
        message = f"the forward pass of this request's batch failed: {type(exc).__name__}: {exc}"[:600]
        for req in batch.reqs:
            self.cache.free_step_slots(req)
            self.fail(req, message)

    def fail_intake(self, msg: TokenizedGenerateReq, req: Req | None, exc: BaseException) -> None:
        """End a request whose intake raised ``exc`` with a 500 naming it. ``req`` is what it became
        (None if it never became a request; its parents' pins are released all the same)."""
        logger.error("request %s failed while being taken in", msg.rid, exc_info=exc)
        message = f"internal error while taking in the request: {f'{type(exc).__name__}: {exc}'[:500]}"
        if req is not None:
            self.fail(req, message)
            return
        self.pins.release_children(list(msg.unpin_rids))
        self.outputs.append(rejected_output(msg, FinishAbort(message, FAILED_STATUS)))
