"""A verify step's greedy tokens in one pass: for a request whose next greedy token depends on the
logits row alone, the token plain decoding would emit at each of its rows is that row's argmax.

``verify_drafts`` samples position by position because a sampled token may depend on the ones before
it (penalties over the output, ``min_new_tokens``, a grammar, a seeded draw per step). For a greedy
request with none of those (no penalty, no ``logit_bias``, no custom processor, no grammar, no
logprobs, ``min_new_tokens`` already reached) nothing before a row changes its token, so one argmax
over the whole step's logits gives every row's token at once, and acceptance needs no sampler call
per round: the same tie-break (``torch.argmax``, the first maximum) as the sampler's greedy rows.
A row whose chosen logit is not finite sends its request back to the sampler, which reports it.
"""

from __future__ import annotations

import torch

from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.scheduled_batch import ScheduledBatch


def history_free(req: Req) -> bool:
    """Whether ``req``'s greedy token is the argmax of its logits row, whatever came before it."""
    p = req.sampling_params
    return (
        p.is_greedy
        and req.grammar is None
        and not req.return_logprob
        and not p.frequency_penalty
        and not p.presence_penalty
        and p.repetition_penalty == 1.0
        and len(req.output_ids) >= p.min_new_tokens
        and not p.logit_bias
        and p.custom_logit_processor is None
    )


def greedy_rows(batch: ScheduledBatch, logits: torch.Tensor) -> dict[int, list[int]]:
    """Request index -> its greedy token at each of its rows (its last token's, then one per draft
    token), for the history-free requests that carry a draft."""
    draft_rows = batch.draft_rows
    fast = [i for i, req in enumerate(batch.reqs) if batch.spec_drafts[i] and history_free(req)]
    if not fast:
        return {}
    argmax = torch.argmax(logits, dim=-1)
    finite = torch.isfinite(logits.gather(1, argmax.unsqueeze(1)).squeeze(1)).tolist()
    tokens = argmax.tolist()
    out: dict[int, list[int]] = {}
    for i in fast:
        first, n = draft_rows[i]
        if all(finite[first : first + n]):
            out[i] = tokens[first : first + n]
    return out
