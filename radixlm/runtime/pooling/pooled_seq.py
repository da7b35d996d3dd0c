"""A decoder's embedding or classification sequence as a scheduler request.

Each sequence of an ``EncodeReq`` becomes a prefill-only ``Req`` (``max_new_tokens`` 0) carrying a
``PooledSeq``: it is admitted, matched against the radix cache, chunked and batched like any prompt,
and finishes after its last extend, its KV committed to the tree like a finished request's. The
forward (``pooled_forward.py``) hands each step's rows of the sequence to ``add``; the scheduler's one
ending path (``TokenProcessor.finish``) calls ``finished``, which delivers the vector (or the failure)
to its job.
"""

from __future__ import annotations

from typing import Any, Literal

import torch

from radixlm.runtime.pooling.encode_jobs import EncodeJob
from radixlm.runtime.sampling.sampling_params import SamplingParams
from radixlm.runtime.scheduler.finish_reason import FinishAbort, FinishReason
from radixlm.runtime.scheduler.req import Req

PoolKind = Literal["last", "mean", "cls", "classify"]


class PooledSeq:
    """Sequence ``index`` of ``job``, pooled by ``kind`` (``classify``: the head on the last token)."""

    def __init__(self, job: EncodeJob, index: int, kind: PoolKind) -> None:
        self.job = job
        self.index = index
        self.kind = kind
        self.total: torch.Tensor | None = None  # mean: the sum of the normed states so far
        self.count = 0
        self.vector: torch.Tensor | None = None

    @property
    def needs_every_token(self) -> bool:
        """Mean and first-token pooling read states the KV cache does not hold: no prefix reuse."""
        return self.kind in ("mean", "cls")

    def add(self, model: Any, h: torch.Tensor, residual: torch.Tensor, first: bool, last: bool) -> None:
        """The final layer's ``(h, residual)`` of this step's tokens (``first``: from position 0;
        ``last``: through the sequence's end)."""
        if self.kind == "classify":
            if last:
                self.vector = model.compute_logits(h[-1:], residual[-1:])[0].float()
            return
        if self.kind == "last" and not last or self.kind == "cls" and not first:
            return
        if self.kind != "mean":
            row = slice(0, 1) if self.kind == "cls" else slice(-1, None)
            self.vector = model.model.norm.add_and_norm(h[row], residual[row])[0][0].float()
            return
        normed = model.model.norm.add_and_norm(h, residual)[0].float().sum(0)
        self.total = normed if self.total is None else self.total + normed
        self.count += int(h.shape[0])
        if last:
            self.vector = self.total / self.count

    def finished(self, reason: FinishReason) -> None:
        if isinstance(reason, FinishAbort):
            self.job.fail(reason.message, reason.status_code)
        elif self.vector is None:
            self.job.fail("encoding failed: the sequence ended before its last token", 500)
        else:
            self.job.put(self.index, self.vector)


def pooled_reqs(job: EncodeJob, kind: PoolKind) -> list[Req]:
    """A prefill-only request per sequence of ``job``."""
    reqs = []
    for i, ids in enumerate(job.msg.input_ids):
        req = Req(f"{job.msg.rid}#{i}", list(ids), SamplingParams(max_new_tokens=0))
        req.pool = PooledSeq(job, i, kind)
        req.group_rid = job.msg.rid  # an abort of the job's rid reaches every sequence
        reqs.append(req)
    return reqs
