"""The scheduler's embedding and scoring side: ``EncodeReq`` in, ``EncodeOut`` out, batched.

A decoder's sequences become prefill-only scheduler requests (``pooled_seq.py``): they wait in the
admission queue, match the radix cache, and share extend batches with generation prompts and with
each other; ``forward`` pools their states, and their KV enters the tree like a finished request's
(evictable unless another request shares it). An encoder has no KV: the sequences of every queued
request run together in padded batches (``encoder_batches.py``) at the start of the next step.
Answers leave in order of arrival (``encode_jobs.py``).

An ``AbortReq`` naming an ``EncodeReq``'s rid drops it: a decoder's sequences are registered in the
scheduler's ``RequestIndex`` under that rid (as a request's samples are), so the scheduler's abort
takes them out of the queue or reaps them before their next chunk, releasing their KV; an encoder's
queued job leaves the queue (``abort``). The job answers with the abort; the server drops it.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from radixlm.runtime.messages import CLIENT_ABORT_STATUS, EncodeOut, EncodeReq
from radixlm.runtime.pooling.encode_jobs import EncodeJob, EncodeJobs
from radixlm.runtime.pooling.encoder_batches import run_encoder
from radixlm.runtime.pooling.pooled_forward import pooled_forward
from radixlm.runtime.pooling.pooled_seq import pooled_reqs
from radixlm.runtime.pooling.pooling_config import PoolingConfig
from radixlm.runtime.pooling.thread_choice import ThreadChoice
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.request_index import RequestIndex
from radixlm.runtime.scheduler.scheduled_batch import ScheduledBatch

logger = logging.getLogger(__name__)


class EncodeStep:
    """Takes ``EncodeReq`` for one model runner (``submit``), and hands out answers (``take_replies``)."""

    def __init__(self, runner: Any, cache: Any, max_tokens: int, requests: RequestIndex) -> None:
        self.runner = runner
        self.cache = cache
        self.requests = requests  # the scheduler's: its sequences are registered there for an abort
        self.max_tokens = max(int(max_tokens), 1)
        self.is_encoder = bool(getattr(runner.model, "is_encoder", False))
        loaded = runner.loaded
        self.pooling = PoolingConfig.from_checkpoint(loaded.model_path, loaded.hf_config, self.is_encoder)
        self.jobs = EncodeJobs()
        self.encoder_queue: list[EncodeJob] = []  # an encoder's jobs until the next step runs them
        on_cpu = runner.device.type == "cpu"
        self.threads = ThreadChoice(torch.get_num_threads()) if on_cpu and self.is_encoder else None

    def submit(self, msg: EncodeReq) -> list[Req]:
        """Queue ``msg``; returns a decoder's requests for the admission queue (none for an encoder,
        or when ``msg`` is refused: its answer is then ready at once)."""
        job = EncodeJob(msg, self.pooling.normalize)
        self.jobs.add(job)
        problem = self._check(msg)
        if problem:
            job.fail(problem, 400)
            return []
        if self.is_encoder:
            self.encoder_queue.append(job)
            return []
        reqs = pooled_reqs(job, "classify" if msg.kind == "classify" else self.pooling.method)
        for req in reqs:
            self.requests.add(req)  # named by ``msg.rid`` (their ``group_rid``) for an abort
        return reqs

    def abort(self, rid: str) -> None:
        """Drop the queued encoder job ``rid`` (a decoder's sequences are aborted as requests)."""
        for job in [j for j in self.encoder_queue if j.msg.rid == rid]:
            self.encoder_queue.remove(job)
            job.fail("aborted", CLIENT_ABORT_STATUS)

    def stats(self) -> dict[str, int]:
        """``num_encode_jobs``: jobs not yet answered; ``num_encode_aborted``: jobs answered aborted."""
        return {"num_encode_jobs": len(self.jobs), "num_encode_aborted": self.jobs.aborted}

    def has_work(self) -> bool:
        return bool(self.encoder_queue) or self.jobs.ready()

    @torch.inference_mode()
    def run_encoder(self) -> None:
        """Every queued encoder request, batched together; a failure fails those requests alone."""
        queued, self.encoder_queue = self.encoder_queue, []
        if not queued:
            return
        try:
            run_encoder(self.runner, queued, self.max_tokens, self.pooling.method, self.threads)
        except Exception as exc:  # noqa: BLE001 - any error of these requests fails only them
            logger.exception("encoding %d requests failed", len(queued))
            for job in queued:
                job.fail(f"encoding failed: {exc!r}", 500)

    def forward(self, batch: ScheduledBatch) -> torch.Tensor:
        """The logits of ``batch`` (``runner.forward``'s); its embedding sequences pool on the way."""
        return pooled_forward(self.runner, batch)

    def take_replies(self) -> list[EncodeOut]:
        """The answers ready, in order of arrival."""
        return self.jobs.take_replies()

    def _check(self, msg: EncodeReq) -> str:
        model = self.runner.model
        if msg.kind == "classify" and not (getattr(model, "has_head", False) or hasattr(model, "score")):
            return "input: this model has no classification head (a *ForSequenceClassification checkpoint)"
        if msg.dimensions is not None and msg.kind == "embed":
            width = int(self.runner.loaded.hf_config.get("hidden_size", 0))
            if not self.pooling.matryoshka:
                return "dimensions: this model does not support Matryoshka truncation"
            allowed = self.pooling.matryoshka_dimensions
            if not 1 <= msg.dimensions <= width or (allowed and msg.dimensions not in allowed):
                sizes = list(allowed) if allowed else f"1 to {width}"
                return f"dimensions: {msg.dimensions} is not one of this model's sizes ({sizes})"
        if getattr(self.runner, "tp", None) is not None:
            return "input: embeddings and scores are not served under tensor parallelism"
        if not msg.input_ids or not all(msg.input_ids):
            return "input: an empty sequence (nothing to encode)"
        longest = max(len(ids) for ids in msg.input_ids)
        if not self.is_encoder and longest > self.cache.capacity:
            return f"input: {longest} tokens do not fit into the KV pool ({self.cache.capacity} slots)"
        return ""
