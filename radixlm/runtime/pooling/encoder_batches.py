"""An encoder's (BERT's) forwards over the sequences of several queued requests at once.

The sequences of every job of one kind (embed, classify) are sorted by length and cut into padded
batches of at most ``max_tokens`` tokens, so similar lengths pad together; each vector goes back to
its job's slot.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import torch

from radixlm.runtime.pooling.encode_jobs import EncodeJob
from radixlm.runtime.pooling.pool import pool_padded
from radixlm.runtime.pooling.pooling_config import PoolingMethod
from radixlm.runtime.pooling.thread_choice import ThreadChoice


def run_encoder(
    runner: Any, jobs: list[EncodeJob], max_tokens: int, method: PoolingMethod, threads: ThreadChoice | None
) -> None:
    """Fill every sequence slot of ``jobs``; ``threads`` (on the CPU) picks each forward's thread count."""
    for kind in ("embed", "classify"):
        seqs = [
            (job, i, ids, job.msg.token_type_ids[i] if job.msg.token_type_ids else None)
            for job in jobs
            if job.msg.kind == kind
            for i, ids in enumerate(job.msg.input_ids)
        ]
        seqs.sort(key=lambda s: len(s[2]))
        for lo, hi in token_batches([len(s[2]) for s in seqs], max_tokens):
            part = seqs[lo:hi]
            ids, types = [s[2] for s in part], [s[3] for s in part]
            forward = partial(_forward, runner, ids, types, kind, method)
            vectors = forward() if threads is None else threads.run(sum(map(len, ids)), forward)
            for (job, i, _, _), vector in zip(part, vectors, strict=True):
                job.put(i, vector)


def token_batches(lens: list[int], max_tokens: int) -> Iterator[tuple[int, int]]:
    """Consecutive ranges of at most ``max_tokens`` tokens, at least one sequence each."""
    lo = 0
    while lo < len(lens):
        hi, total = lo, 0
        while hi < len(lens) and (hi == lo or total + lens[hi] <= max_tokens):
            total += lens[hi]
            hi += 1
        yield lo, hi
        lo = hi


def _forward(
    runner: Any, ids: list[list[int]], types: list[list[int] | None], kind: str, method: PoolingMethod
) -> torch.Tensor:
    device = runner.device
    width = max(len(s) for s in ids)
    padded = any(len(s) != width for s in ids)
    if padded:
        tokens = torch.zeros((len(ids), width), dtype=torch.int64)
        for i, seq in enumerate(ids):
            tokens[i, : len(seq)] = torch.tensor(seq)
    else:  # one sequence, or several of one length: built at once (the batch-1 path)
        tokens = torch.tensor(ids, dtype=torch.int64)
    type_ids = torch.zeros_like(tokens)
    for i, tt in enumerate(types):
        if tt:
            type_ids[i, : len(tt)] = torch.tensor(tt)
    lens = torch.tensor([len(s) for s in ids], device=device)
    model = runner.model
    tokens, type_ids = tokens.to(device), type_ids.to(device)
    if kind == "classify":
        return model.classify(tokens, type_ids, lens)
    return pool_padded(model(tokens, type_ids, lens), lens, method, padded)
