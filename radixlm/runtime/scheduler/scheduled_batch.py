"""What scheduling hands to the forward and to processing: the requests, the batch, the logits layout."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from radixlm.runtime.executor.forward_batch import ForwardBatch
from radixlm.runtime.scheduler.req import Req


class BatchKind(enum.Enum):
    EXTEND = "extend"  # newly admitted prompts, or the next chunk of a chunked prefill
    DECODE = "decode"  # one token per running request
    MIXED = "mixed"  # every running request extends over its uncomputed tokens (after a jump-forward)
    MIXED_CHUNK = "mixed_chunk"  # prompt chunks first, then one decode token per running request
    VERIFY = "verify"  # every running request extends over its last token and its speculative draft


@dataclass
class ScheduledBatch:
    """One step's work. Every request computes ``extend_len`` tokens (slots already in its row).

    ``sample_rows[i]`` is the logits row request ``i`` samples from, -1 when this step does not
    finish its prompt (a middle chunk). ``input_logprob_rows[i]`` (extend only) is ``(first_row,
    count, first_position)`` of the rows giving input logprobs (position ``p`` predicts token
    ``p + 1``). ``draft_rows[i]`` (mixed only) is ``(first_row, count)`` of the rows covering a
    request's unverified jump-forward draft and its last token; the rows to sample are known only
    after verification. ``num_prefill_reqs`` (mixed chunk only) is how many leading requests are
    prompt chunks; the rest are the running decodes. ``spec_drafts[i]`` (verify only) is request
    ``i``'s speculative draft, its rows ``draft_rows[i]`` (last token, then one per draft token).
    """

    kind: BatchKind
    reqs: list[Req]
    forward_batch: ForwardBatch
    sample_rows: list[int]
    input_logprob_rows: list[tuple[int, int, int]] = field(default_factory=list)
    draft_rows: list[tuple[int, int]] = field(default_factory=list)
    num_prefill_reqs: int = 0
    spec_drafts: list[list[int]] = field(default_factory=list)

    @property
    def num_input_tokens(self) -> int:
        return int(self.forward_batch.input_ids.numel())
