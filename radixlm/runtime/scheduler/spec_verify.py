"""Speculative decoding in the scheduler: a decode step whose rows carry drafts, verified in one extend.

Each running request computes its last token plus its draft (a chain of ``k`` guessed tokens,
``k = 0`` for a request without one) in ONE forward with logits at every position; the forward is a
decode batch with one row per position (``build_verify_batch``). Then
verification samples position by position (``verify_drafts``): round ``j`` samples, for every
request still agreeing, the token at draft position ``j`` exactly as a plain decode step would (the
same sampler, grammar mask, penalties, logprobs, per-step seeded generator), advances the request
through the usual path (grammar, stop checks), and the request goes on to round ``j + 1`` only when
the sampled token equals draft token ``j``. So every emitted token is the one plain decoding emits,
greedy or sampled, and a stop inside the accepted run cuts it there.

Why sampling and comparing is standard speculative sampling: an n-gram draft is a point mass on
its token ``x``; the rule "accept with probability p(x), else draw from p with x removed and
renormalised" yields the same law as "draw y ~ p; accept iff y == x, else emit y". With the
request's per-step generator it is even the same draw, token for token, as without speculation.

KV (``cache_manager.py``'s ownership): the step takes ``1 + k`` slots per request. After the
forward ``kv_len`` covers the last token only; each accepted draft token adds its (already computed)
slot, and the slots of rejected tokens go back to the allocator at once. The model's own token
after the accepted run has no KV yet, like any freshly sampled token.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from radixlm.runtime.executor.forward_batch import ForwardBatch, ForwardMode
from radixlm.runtime.scheduler.batch_builder import lora_slots
from radixlm.runtime.scheduler.cache_manager import CacheManager
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.scheduled_batch import BatchKind, ScheduledBatch
from radixlm.runtime.speculative.speculator import Speculator

SampleRound = Callable[[list[Req], list[int]], None]
AdvanceRound = Callable[[list[Req], list[int]], None]  # requests and the tokens they take


def build_verify_batch(
    reqs: list[Req], drafts: list[list[int]], cache: CacheManager, runner: Any
) -> ScheduledBatch | None:
    """Slots for every request's last token and draft, and the extend computing them with logits at
    every position; None (nothing taken) when the KV pool cannot hold the step."""
    need = [1 + len(d) for d in drafts]
    slots = cache.alloc_slots(sum(need))
    if slots is None:
        return None
    ids: list[int] = []
    positions: list[int] = []
    draft_rows: list[tuple[int, int]] = []
    offset = 0
    for req, draft, n in zip(reqs, drafts, need):
        assert req.row is not None, "a running request holds a row"
        cache.req_to_token_pool.write(req.row, req.kv_len, slots[offset : offset + n])
        req.extend_len = n
        ids.append(req.output_ids[-1])
        ids.extend(draft)
        positions.extend(range(req.kv_len, req.kv_len + n))
        draft_rows.append((offset, n))
        offset += n
    # NOTE: one decode row per position: row j of a request attends to its first kv_len + j + 1
    # keys, the drafts' keys written by this same step's layers before they attend. The in-place
    # decode kernels then serve the verify step (an extend's attention over a long context costs
    # several decode steps on a CPU), and every row attends exactly as plain decoding would.
    device = runner.device
    rows = [r.row for r, n in zip(reqs, need) for _ in range(n)]
    seq_lens = [p + 1 for p in positions]
    num = len(positions)
    fb = ForwardBatch(
        mode=ForwardMode.DECODE,
        input_ids=torch.tensor(ids, dtype=torch.int64, device=device),
        positions=torch.tensor(positions, dtype=torch.int64, device=device),
        req_pool_indices=torch.tensor(rows, dtype=torch.int64, device=device),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int64, device=device),
        extend_prefix_lens=torch.tensor(positions, dtype=torch.int64, device=device),
        extend_seq_lens=torch.ones(num, dtype=torch.int64, device=device),
        out_cache_loc=slots.to(device),
        logits_indices=torch.arange(num, dtype=torch.int64, device=device),
        req_to_token_pool=runner.req_to_token_pool,
        kv_pool=runner.kv_pool,
        attn_backend=runner.attn_backend,
        seq_lens_cpu=seq_lens,
    )
    fb.row_groups = need  # a request's rows: its keys are read once for all of them
    # one decode row per position, so each row carries its request's adapter
    fb.lora_slots = lora_slots([r for r, n in zip(reqs, need) for _ in range(n)], runner)
    batch = ScheduledBatch(BatchKind.VERIFY, list(reqs), fb, [first for first, _ in draft_rows])
    batch.draft_rows = draft_rows
    batch.spec_drafts = drafts
    return batch


def verify_drafts(
    batch: ScheduledBatch,
    cache: CacheManager,
    speculator: Speculator,
    sample_round: SampleRound,
    known: dict[int, list[int]] | None = None,
    advance_round: AdvanceRound | None = None,
) -> None:
    """Sample and accept position by position (see the module docstring); ``kv_len`` was already
    advanced over the whole step. ``sample_round(reqs, rows)`` samples and advances ``reqs`` from
    the given logits rows (a request may finish or fail there). ``known``: request index -> the
    tokens already decided for its rows (``spec_greedy.py``); those requests advance by
    ``advance_round(reqs, tokens)`` instead of sampling."""
    known = known or {}
    assert advance_round is not None or not known, "known tokens need advance_round"
    table = cache.req_to_token_pool.req_to_token
    draft_slots: list[torch.Tensor] = []
    for req in batch.reqs:
        base = req.kv_len - req.extend_len
        draft_slots.append(table[req.row, base + 1 : req.kv_len].clone())
        req.kv_len = base + 1  # the drafts' KV counts only once accepted
    accepted = [0] * len(batch.reqs)
    active = list(range(len(batch.reqs)))
    j = 0
    while active:
        sampled = [i for i in active if i not in known]
        if sampled:
            sample_round([batch.reqs[i] for i in sampled], [batch.draft_rows[i][0] + j for i in sampled])
        decided = [i for i in active if i in known]
        if decided and advance_round is not None:
            advance_round([batch.reqs[i] for i in decided], [known[i][j] for i in decided])
        still: list[int] = []
        for i in active:
            req, draft = batch.reqs[i], batch.spec_drafts[i]
            if not req.finished and j < len(draft) and req.output_ids[-1] == draft[j]:
                accepted[i] += 1
                req.kv_len += 1
                still.append(i)
        active = still
        j += 1
    for i, req in enumerate(batch.reqs):
        if accepted[i] < draft_slots[i].numel():
            cache.allocator.free(draft_slots[i][accepted[i] :])
        if batch.spec_drafts[i]:
            speculator.on_verified(req, len(batch.spec_drafts[i]), accepted[i])
