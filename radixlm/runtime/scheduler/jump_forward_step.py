"""Jump-forward in the scheduler: splice forced tokens into a running request, compute them in one step.

After a constrained request accepted its sampled token, ``JumpForwardStep.apply`` asks the grammar for
a forced continuation; when there is one, the output's tail is re-tokenized together with it
(``constrained.jump_forward``), dropped tokens give back their KV and the forced tokens are appended
without KV. The request stays in the running batch with ``kv_len < seq_len - 1``; the next step is then
a mixed step (``prepare``): every running request extends over its uncomputed tokens (one for plain
decoding, more after a jump) in ONE extend forward, and samples from its last position.

KV ownership on truncation (see ``cache_manager.py``): private slots past the new length go back to
the allocator; tokens the tree owns stay in the tree (the request keeps its lock on ``last_node``,
released as usual) and ``prefix_len`` drops to the new length so the private tail stays contiguous.
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from radixlm.runtime.constrained.jump_forward import MAX_RETOKENIZED, jump_forward
from radixlm.runtime.forward_batch import ForwardBatch
from radixlm.runtime.scheduler.batch_builder import build_extend_batch
from radixlm.runtime.scheduler.cache_manager import CacheManager
from radixlm.runtime.scheduler.req import Req


class JumpForwardStep:
    """Applies jump-forward to requests and plans the mixed extend step that computes the new tokens.

    Skipped for requests that return logprobs (forced tokens have none) or use stop strings (the stop
    checker scans only a few trailing tokens). Already streamed tokens are never re-tokenized.
    """

    def __init__(self, tokenizer: Any, cache: CacheManager, context_length: int) -> None:
        self.tokenizer = tokenizer
        self.cache = cache
        self.context_length = context_length
        self.num_jumps = 0
        self.num_forced_tokens = 0

    def apply(self, req: Req) -> bool:
        """Jump ``req`` forward if its grammar forces a continuation; True when its tokens changed.

        Also right after the grammar compiled (no KV yet): the forced start joins the prompt's extend.
        """
        matcher = req.grammar
        p = req.sampling_params
        if matcher is None or req.return_logprob or p.stop:
            return False
        forced = matcher.forced_continuation()
        if not forced:
            return False
        unsent = len(req.output_ids) - req.sent_output_len if req.stream else len(req.output_ids)
        jf = jump_forward(matcher, req.output_ids, self.tokenizer, forced, min(MAX_RETOKENIZED, unsent))
        if jf is None:
            return False
        new_len = jf.keep_len + len(jf.token_ids)
        # NOTE: room stays for at least one sampled token, so max_new_tokens is never exceeded.
        if new_len >= p.max_new_tokens or len(req.origin_input_ids) + new_len >= self.context_length:
            return False
        self._truncate_kv(req, len(req.origin_input_ids) + jf.keep_len)
        req.output_ids[jf.keep_len :] = jf.token_ids
        req.grammar = jf.matcher
        self.num_jumps += 1
        self.num_forced_tokens += len(jf.token_ids)
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

    @staticmethod
    def has_pending(running: list[Req]) -> bool:
        """True when some running request has more than its last token to compute (it jumped)."""
        return any(r.seq_len - r.kv_len > 1 for r in running)

    def prepare(self, running: list[Req], runner: Any) -> Optional[tuple[ForwardBatch, torch.Tensor]]:
        """Slots for every running request's uncomputed tokens and the mixed extend batch.

        Returns ``(batch, sample_rows)`` (one logits row per request, in ``running`` order); None, with
        nothing allocated, when the KV pool cannot hold the step (the caller retracts and retries).
        """
        need = [r.seq_len - r.kv_len for r in running]
        slots = self.cache.alloc_slots(sum(need))
        if slots is None:
            return None
        offset = 0
        for req, n in zip(running, need):
            self.cache.req_to_token_pool.write(req.row, req.kv_len, slots[offset : offset + n])
            req.extend_len = n
            offset += n
        fb, layout = build_extend_batch(running, runner)
        return fb, torch.tensor(layout.sample_row, dtype=torch.int64, device=fb.input_ids.device)
