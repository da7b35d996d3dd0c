"""Encode requests in flight: one ``EncodeJob`` per ``EncodeReq``, answered in order of arrival.

A job's sequences are computed separately (a decoder's as scheduler requests in extend batches, an
encoder's in padded batches beside other jobs' sequences); each lands in its slot, and once every
slot is filled (or one failed) the job's ``EncodeOut`` is ready. Answers leave in the order the
requests arrived: the server pairs replies with requests first in, first out.
"""

from __future__ import annotations

from collections import deque

import torch

from radixlm.runtime.messages import CLIENT_ABORT_STATUS, EncodeOut, EncodeReq
from radixlm.runtime.pooling.pool import finish


class EncodeJob:
    """One ``EncodeReq``: a vector per sequence, or the first error."""

    def __init__(self, msg: EncodeReq, normalize: bool) -> None:
        self.msg = msg
        self.normalize = normalize
        self.vectors: list[torch.Tensor | None] = [None] * len(msg.input_ids)
        self.left = len(msg.input_ids)
        self.error = ""
        self.status = 400

    @property
    def done(self) -> bool:
        return self.left == 0 or bool(self.error)

    def put(self, index: int, vector: torch.Tensor) -> None:
        """Sequence ``index``'s vector (float32 ``[width]``)."""
        if self.vectors[index] is None:
            self.left -= 1
        self.vectors[index] = vector

    def fail(self, message: str, status: int) -> None:
        """The job ends with ``message`` (the first failure of its sequences wins)."""
        if not self.error:
            self.error, self.status = message, status

    def reply(self) -> EncodeOut:
        if self.error:
            return EncodeOut(self.msg.rid, error=self.error, status=self.status)
        out = torch.stack([v for v in self.vectors if v is not None])
        if self.msg.kind == "embed":
            out = finish(out, self.normalize, self.msg.dimensions)
        return EncodeOut(self.msg.rid, out.tolist())


class EncodeJobs:
    """The jobs in arrival order; ``take_replies`` hands out the finished ones at the head."""

    def __init__(self) -> None:
        self._jobs: deque[EncodeJob] = deque()
        self.aborted = 0  # jobs answered as aborted by their client

    def __len__(self) -> int:
        return len(self._jobs)

    def add(self, job: EncodeJob) -> None:
        self._jobs.append(job)

    def ready(self) -> bool:
        return bool(self._jobs) and self._jobs[0].done

    def take_replies(self) -> list[EncodeOut]:
        out = []
        while self._jobs and self._jobs[0].done:
            job = self._jobs.popleft()
            self.aborted += job.status == CLIENT_ABORT_STATUS and bool(job.error)
            out.append(job.reply())
        return out
