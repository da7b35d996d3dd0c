"""Failures inside one scheduler step: what fails one request, what fails a batch, what stops the runtime.

- Sampling-side failures belong to one request: its grammar matcher (``fill_bitmask``,
  ``accept_token``), its penalties or ``logit_bias``, its draw, or logits that are not finite in its
  row only. That request ends with a 500 naming the problem; its KV and matcher are released and
  the rest of the batch samples as if it were not there (each row's processing touches only its row).
- A forward pass that raises is batch-wide: no row's logits can be trusted and no request can be
  blamed. The batch's requests end with a 500, the step's freshly taken KV slots (which may hold
  partial writes) go back to the free pool without entering the prefix cache, and the loop goes on:
  requests outside the batch, the cache and the pools are intact.
- The same failure ``max_forward_failures`` times in a row (``ForwardFailures``) is no longer one
  bad batch but a broken runtime (a corrupted device, a model that cannot run): ``BrokenRuntime`` is
  raised out of ``step()``, the scheduler process exits, the server fails every client and exits.
  Under tensor parallelism the first failure already does: the ranks' collectives are out of step.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import torch

from radixlm.runtime.sampling.sampler import SampleOutput, sample
from radixlm.runtime.scheduler.finish_reason import FinishAbort
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.scheduled_batch import ScheduledBatch
from radixlm.runtime.scheduler.token_output import take_token_output

logger = logging.getLogger(__name__)

FAILED_STATUS = 500


class BrokenRuntime(RuntimeError):
    """The runtime can no longer serve (a forward pass failing again and again): the process exits."""


class ForwardFailures:
    """Counts forward passes that raised in a row; ``limit`` of them is a broken runtime."""

    def __init__(self, limit: int) -> None:
        self.limit = max(int(limit), 1)
        self.in_a_row = 0

    def on_success(self) -> None:
        self.in_a_row = 0

    def on_failure(self, exc: BaseException) -> None:
        """Record one failure; raise ``BrokenRuntime`` when it makes ``limit`` in a row."""
        self.in_a_row += 1
        if self.in_a_row >= self.limit:
            raise BrokenRuntime(
                f"the forward pass failed {self.in_a_row} times in a row; last: {type(exc).__name__}: {exc}"
            ) from exc


def fail_forward_batch(sched: Any, batch: ScheduledBatch, exc: BaseException) -> None:
    """End every request of ``batch`` (whose forward raised ``exc``) with a 500, releasing its KV:
    the step's slots are freed unwritten-to-the-tree, what was computed before stays cached."""
    logger.error(
        "the forward pass of a %s batch of %d requests failed: %r", batch.kind.name, len(batch.reqs), exc
    )
    message = f"the forward pass of this request's batch failed: {type(exc).__name__}: {exc}"[:600]
    in_batch = {id(r) for r in batch.reqs}
    sched.running = [r for r in sched.running if id(r) not in in_batch]
    if sched.chunked is not None and id(sched.chunked) in in_batch:
        sched.chunked = None
    for req in batch.reqs:
        sched.cache.free_step_slots(req)
        fail_request(sched, req, message)


def fail_request(sched: Any, req: Req, message: str) -> None:
    """End ``req`` with a 500 naming ``message``; its KV and grammar matcher are released."""
    req.grammar = None
    sched._finish(req, FinishAbort(message, FAILED_STATUS))


def sample_and_advance(sched: Any, reqs: list[Req], logits: torch.Tensor) -> None:
    """Sample each request's next token and advance it (stop check, jump-forward, streaming). A
    failure that belongs to one request (its grammar matcher, penalties, logit_bias, non-finite
    logits, ``accept_token``) fails that request alone."""
    result = sample(logits, reqs, sched.eos_token_ids, errors=sched.grammars.apply_masks(reqs, logits))
    sched.counters.on_generated(len(reqs) - len(result.errors))
    may_jump = sched.jump_forward is not None and sched.jump_forward.allows(len(sched.running))
    for i, req in enumerate(reqs):
        if i in result.errors:
            fail_request(sched, req, f"sampling failed for this request: {result.errors[i]}")
            continue
        try:
            _advance(sched, req, result, i, may_jump)
        except Exception as e:  # noqa: BLE001 - e.g. its grammar matcher's accept_token raising
            logger.exception("request %s failed after sampling", req.rid)
            fail_request(sched, req, f"advancing this request failed: {type(e).__name__}: {e}")


def _advance(sched: Any, req: Req, result: SampleOutput, i: int, may_jump: bool) -> None:
    token = result.next_token_ids[i]
    req.output_ids.append(token)
    if req.first_token_at is None:
        req.first_token_at = time.perf_counter()
    if req.return_logprob:
        req.logprobs.output_tokens.append((result.logprobs[i], token))
        req.logprobs.output_top.append(result.top_logprobs[i] or [])
    if req.grammar is not None and not req.grammar.accept_token(token):
        if token not in sched.eos_token_ids:
            broken = req.grammar.broken_reason()
            if broken is not None:  # the client's grammar cannot be satisfied (e.g. root ::= "a" root)
                sched._finish(req, FinishAbort(f"the grammar cannot be completed: {broken}", 400))
            else:
                sched._finish(req, FinishAbort(f"grammar rejected token {token}", FAILED_STATUS))
            return
    reason = sched.stop_checker.check(req)
    if reason is None and may_jump and sched.jump_forward.apply(req):
        reason = sched.stop_checker.check(req)
    if reason is not None:
        sched._finish(req, reason)
    elif req.stream:
        sched.pending_outputs.append(take_token_output(req))
