"""Jump-forward in the scheduler: splice forced tokens into a running request, compute them in one step.

After a constrained request accepted its sampled token, ``JumpForwardStep.apply`` asks the grammar for
a forced continuation and appends its tokens (without KV). The request stays in the running batch with
``kv_len < seq_len - 1``; the next step is a mixed step (``prepare`` returns a ``ScheduledBatch`` of
kind MIXED): every running request extends over its uncomputed tokens (one for plain decoding, more
after a jump) in ONE extend forward.

Greedy requests must produce exactly the text of plain constrained decoding, and the model's own
split of a forced string into tokens can differ from the tokenizer's (``"`` then ``{{`` vs ``"{{``).
So for them the forced tokens are a draft: ``verify`` checks each against the masked argmax at its
position (logits the mixed step computed anyway), keeps the longest agreeing prefix and samples the
next token where the model disagreed. Sampled requests take the forced string re-tokenized together
with the output's last few tokens (``constrained.jump_forward``), unverified.

A draft's tokens are computed only by the mixed step that verifies them. A request retracted before
that step withdraws its draft (``withdraw_draft``): the recomputed extend then samples the position
of the draft's first token from the masked logits like any greedy step, and the grammar forces the
rest again as a new draft, verified in the next mixed step. Greedy output stays that of plain
constrained decoding.

KV ownership on truncation (see ``cache_manager.py``): private slots past the new length go back to
the allocator; tokens the tree owns stay in the tree (the request keeps its lock on ``last_node``,
released as usual) and ``prefix_len`` drops to the new length so the private tail stays contiguous.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from radixlm.kernels.token_bitmask import apply_token_bitmask
from radixlm.runtime.constrained.jump_forward import MAX_RETOKENIZED, jump_forward
from radixlm.runtime.scheduler.batch_builder import build_extend_batch
from radixlm.runtime.scheduler.cache_manager import CacheManager
from radixlm.runtime.scheduler.jump_draft import JumpDraft
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.scheduled_batch import BatchKind, ScheduledBatch

# NOTE: on a CPU a mixed extend costs per token like decode once many requests run, so forced
# tokens pay off only in small batches; on CUDA the one extend is always cheaper.
CPU_DEFAULT_MAX_BATCH = 8


def resolve_max_batch(max_batch: int | None, device: torch.device) -> int:
    """The running-batch size up to which requests jump forward (``None``: the device's default)."""
    if max_batch is not None:
        return max_batch
    return CPU_DEFAULT_MAX_BATCH if device.type == "cpu" else 1 << 30


def withdraw_draft(req: Req) -> None:
    """Drop ``req``'s unverified jump-forward tokens (it is being retracted): its output ends where
    the draft began and its grammar is back in the state before the draft. They had no KV yet."""
    draft = req.jump_draft
    if draft is None:
        return
    del req.output_ids[draft.start :]
    req.output_changed_from(draft.start)
    req.grammar = draft.matcher
    req.jump_draft = None


def _verifiable(req: Req) -> bool:
    """No penalties: for a greedy request the masked argmax at a position is then what decoding picks."""
    p = req.sampling_params
    return p.frequency_penalty == 0 and p.presence_penalty == 0 and p.repetition_penalty == 1


class JumpForwardStep:
    """Applies jump-forward to requests, plans the mixed extend step and verifies greedy drafts.

    Skipped for requests that return logprobs (forced tokens have none), use stop strings (the stop
    checker scans only a few trailing tokens), or decode greedily with penalties. Already streamed
    tokens are never re-tokenized.
    """

    def __init__(self, tokenizer: Any, cache: CacheManager, context_length: int, max_batch: int) -> None:
        self.tokenizer = tokenizer
        self.cache = cache
        self.context_length = context_length
        self.max_batch = max_batch
        self.stats = {"jumps": 0, "forced_tokens": 0, "draft_tokens": 0, "draft_accepted": 0}

    # ---- after a token was accepted -------------------------------------------------------------
    def allows(self, running_size: int) -> bool:
        """Whether requests may jump while ``running_size`` requests run."""
        return running_size <= self.max_batch

    def apply(self, req: Req) -> bool:
        """Jump ``req`` forward if its grammar forces a continuation; True when its tokens changed."""
        matcher = req.grammar
        p = req.sampling_params
        greedy = p.is_greedy
        if matcher is None or req.return_logprob or p.stop or (greedy and not _verifiable(req)):
            return False
        forced = matcher.forced_continuation()
        if not forced:
            return False
        unsent = len(req.output_ids) - req.sent_output_len if req.stream else len(req.output_ids)
        retokenized = 0 if greedy else min(MAX_RETOKENIZED, unsent)
        jf = jump_forward(matcher, req.output_ids, self.tokenizer, forced, retokenized)
        if jf is None or not jf.token_ids:
            return False
        new_len = jf.keep_len + len(jf.token_ids)
        # NOTE: room stays for at least one sampled token, so max_new_tokens is never exceeded.
        if new_len >= p.max_new_tokens or len(req.origin_input_ids) + new_len >= self.context_length:
            return False
        self._truncate_kv(req, len(req.origin_input_ids) + jf.keep_len)
        req.output_ids[jf.keep_len :] = jf.token_ids
        req.output_changed_from(jf.keep_len)
        if greedy:
            req.jump_draft = JumpDraft(jf.keep_len, list(jf.token_ids), matcher)
        req.grammar = jf.matcher
        self.stats["jumps"] += 1
        self.stats["forced_tokens"] += len(jf.token_ids)
        return True

    def _truncate_kv(self, req: Req, keep_tokens: int) -> None:
        """Forget the KV of tokens from position ``keep_tokens`` on (their private slots are freed)."""
        if keep_tokens >= req.kv_len:
            return
        table = self.cache.req_to_token_pool.req_to_token
        first_private = max(keep_tokens, req.prefix_len)
        if first_private < req.kv_len:
            self.cache.allocator.free(table[req.row, first_private : req.kv_len].clone())
        req.prefix_len = min(req.prefix_len, keep_tokens)
        req.kv_len = keep_tokens

    # ---- the mixed step -------------------------------------------------------------------------
    @staticmethod
    def has_pending(running: list[Req]) -> bool:
        """True when some running request has more than its last token to compute (it jumped)."""
        return any(r.seq_len - r.kv_len > 1 for r in running)

    def prepare(self, running: list[Req], runner: Any) -> ScheduledBatch | None:
        """Slots for every running request's uncomputed tokens, and the mixed extend computing them.

        A request with a draft gets logits for the draft's positions too. Returns None, with nothing
        allocated, when the KV pool cannot hold the step (the caller retracts and retries).
        """
        need = [r.seq_len - r.kv_len for r in running]
        slots = self.cache.alloc_slots(sum(need))
        if slots is None:
            return None
        offset = 0
        for req, n in zip(running, need):
            assert req.row is not None, "a running request holds a row"
            self.cache.req_to_token_pool.write(req.row, req.kv_len, slots[offset : offset + n])
            req.extend_len = n
            offset += n
        batch = build_extend_batch(running, runner, BatchKind.MIXED)
        indices: list[int] = []
        rows: list[tuple[int, int]] = []
        offset = 0
        for req in running:
            draft = req.jump_draft
            first = req.extend_len - 1
            if draft is not None:
                first_draft_pos = len(req.origin_input_ids) + draft.start
                assert req.kv_len < first_draft_pos, "a draft was computed outside its mixed step"
                first = first_draft_pos - 1 - req.kv_len  # the position predicting the draft's first token
            rows.append((len(indices), req.extend_len - first))
            indices.extend(range(offset + first, offset + req.extend_len))
            offset += req.extend_len
        fb = batch.forward_batch
        fb.logits_indices = torch.tensor(indices, dtype=torch.int64, device=fb.input_ids.device)
        batch.draft_rows = rows
        batch.sample_rows = [first + count - 1 for first, count in rows]
        return batch

    def verify(
        self, batch: ScheduledBatch, logits: torch.Tensor, fail: Callable[[Req, str], None]
    ) -> tuple[list[Req], list[int]]:
        """Check greedy drafts after the forward (``kv_len`` already advanced); the requests to sample
        and the row each samples from.

        A rejected draft token and everything after it are dropped (with their KV); the request then
        samples from the logits at the rejected position, which is what plain decoding would have done.
        A request whose check raises is handed to ``fail`` and left out; the others go on.
        """
        to_sample: list[Req] = []
        sample_rows: list[int] = []
        for req, (first, count) in zip(batch.reqs, batch.draft_rows):
            draft = req.jump_draft
            if draft is None:
                to_sample.append(req)
                sample_rows.append(first + count - 1)
                continue
            req.jump_draft = None
            try:
                accepted = self._accepted_prefix(draft, logits[first : first + count - 1])
            except Exception as e:  # noqa: BLE001 - one request's grammar must not stop the batch
                fail(req, f"verifying its jump-forward draft failed: {type(e).__name__}: {e}")
                continue
            self.stats["draft_tokens"] += len(draft.token_ids)
            self.stats["draft_accepted"] += accepted
            if accepted < len(draft.token_ids):
                matcher = draft.matcher
                for token in draft.token_ids[:accepted]:
                    matcher.accept_token(token)
                req.grammar = matcher
                keep = draft.start + accepted
                del req.output_ids[keep:]
                req.output_changed_from(keep)
                self._truncate_kv(req, len(req.origin_input_ids) + keep)
            to_sample.append(req)
            sample_rows.append(first + accepted)
        return to_sample, sample_rows

    def _accepted_prefix(self, draft: JumpDraft, logits: torch.Tensor) -> int:
        """How many draft tokens equal the masked argmax at their position.

        ``logits[i]`` predicts draft token ``i``.
        """
        matcher = draft.matcher.copy()
        bitmask = torch.zeros((len(draft.token_ids), (logits.shape[1] + 31) // 32), dtype=torch.int32)
        for i, token in enumerate(draft.token_ids):
            matcher.fill_bitmask(bitmask, i)
            matcher.accept_token(token)
        masked = logits.clone()
        apply_token_bitmask(masked, bitmask.to(masked.device))
        agree = (masked.argmax(dim=-1).cpu() == torch.tensor(draft.token_ids)).tolist()
        return agree.index(False) if False in agree else len(agree)
