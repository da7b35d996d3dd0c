"""Build the ``ScheduledBatch`` of an extend, a decode or a mixed-chunk step from requests whose slots
are in place."""

from __future__ import annotations

from typing import Any

import torch

from radixlm.runtime.executor.forward_batch import ForwardBatch, ForwardMode
from radixlm.runtime.multimodal.encoder_stage import attach_image_rows
from radixlm.runtime.multimodal.image_spans import spans_in
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.scheduled_batch import BatchKind, ScheduledBatch


def build_extend_batch(reqs: list[Req], runner: Any, kind: BatchKind = BatchKind.EXTEND) -> ScheduledBatch:
    """Each request computes ``fill_ids[kv_len : kv_len + extend_len]`` (slots already in its row)."""
    device = runner.device
    table = runner.req_to_token_pool.req_to_token
    ids: list[int] = []
    positions: list[torch.Tensor] = []
    locs: list[torch.Tensor] = []
    logits_idx: list[int] = []
    sample_rows: list[int] = []
    input_rows: list[tuple[int, int, int]] = []
    offset = 0
    for req in reqs:
        start, end = req.kv_len, req.kv_len + req.extend_len
        ids.extend(req.fill_ids[start:end])
        positions.append(torch.arange(start, end, dtype=torch.int64))
        locs.append(table[req.row, start:end])
        first_in = count_in = 0
        if req.needs_input_logprobs:
            lo = max(req.logprob_start_len - 1, start)
            hi = min(end, len(req.origin_input_ids) - 1)  # the last prompt position predicts output 0
            if hi > lo:
                first_in, count_in = len(logits_idx), hi - lo
                logits_idx.extend(range(offset + lo - start, offset + hi - start))
        input_rows.append((first_in, count_in, max(req.logprob_start_len - 1, start)))
        if end == req.seq_len:
            sample_rows.append(len(logits_idx))
            logits_idx.append(offset + end - 1 - start)
        else:
            sample_rows.append(-1)
        offset += req.extend_len

    fb = ForwardBatch(
        mode=ForwardMode.EXTEND,
        input_ids=torch.tensor(ids, dtype=torch.int64, device=device),
        positions=torch.cat(positions).to(device),
        req_pool_indices=torch.tensor([r.row for r in reqs], dtype=torch.int64, device=device),
        seq_lens=torch.tensor([r.kv_len + r.extend_len for r in reqs], dtype=torch.int64, device=device),
        extend_prefix_lens=torch.tensor([r.kv_len for r in reqs], dtype=torch.int64, device=device),
        extend_seq_lens=torch.tensor([r.extend_len for r in reqs], dtype=torch.int64, device=device),
        out_cache_loc=torch.cat(locs).to(device),
        logits_indices=torch.tensor(logits_idx, dtype=torch.int64, device=device),
        req_to_token_pool=runner.req_to_token_pool,
        kv_pool=runner.kv_pool,
        attn_backend=runner.attn_backend,
        seq_lens_cpu=[r.kv_len + r.extend_len for r in reqs],
        extend_prefix_lens_cpu=[r.kv_len for r in reqs],
        extend_seq_lens_cpu=[r.extend_len for r in reqs],
    )
    cache = getattr(runner, "encoder_cache", None)
    if cache is not None:  # a vision-language model: the encoder stage first
        attach_image_rows(fb, reqs, runner.model, cache)
        spans = [spans_in(r.image_spans, r.kv_len, r.kv_len + r.extend_len) for r in reqs]
        fb.image_spans = spans if any(spans) else None  # None: the causal fast path
    fb.lora_slots = lora_slots(reqs, runner)
    return ScheduledBatch(kind, list(reqs), fb, sample_rows, input_logprob_rows=input_rows)


def build_decode_batch(reqs: list[Req], slots: torch.Tensor, runner: Any) -> ScheduledBatch:
    """Each request computes its last generated token at position ``kv_len`` into ``slots[i]``."""
    device = runner.device
    bs = len(reqs)
    for req in reqs:
        req.extend_len = 1
    seq_lens = [r.kv_len + 1 for r in reqs]
    fb = ForwardBatch(
        mode=ForwardMode.DECODE,
        input_ids=torch.tensor([r.output_ids[-1] for r in reqs], dtype=torch.int64, device=device),
        positions=torch.tensor([r.kv_len for r in reqs], dtype=torch.int64, device=device),
        req_pool_indices=torch.tensor([r.row for r in reqs], dtype=torch.int64, device=device),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int64, device=device),
        extend_prefix_lens=torch.tensor([r.kv_len for r in reqs], dtype=torch.int64, device=device),
        extend_seq_lens=torch.ones(bs, dtype=torch.int64, device=device),
        out_cache_loc=slots.to(device),
        logits_indices=torch.arange(bs, dtype=torch.int64, device=device),
        req_to_token_pool=runner.req_to_token_pool,
        kv_pool=runner.kv_pool,
        attn_backend=runner.attn_backend,
        seq_lens_cpu=seq_lens,
    )
    fb.lora_slots = lora_slots(reqs, runner)
    return ScheduledBatch(BatchKind.DECODE, list(reqs), fb, list(range(bs)))


def build_mixed_chunk_batch(prefill: list[Req], running: list[Req], runner: Any) -> ScheduledBatch:
    """Prompt chunks of ``prefill``, then one decode token of each ``running`` request (its slot
    already at position ``kv_len``), as one extend: the decodes are 1-token extends at the end,
    which the attention backend reads like a decode."""
    for req in running:
        req.extend_len = 1
    batch = build_extend_batch([*prefill, *running], runner, BatchKind.MIXED_CHUNK)
    batch.num_prefill_reqs = len(prefill)
    return batch


def lora_slots(reqs: list[Req], runner: Any) -> list[int] | None:
    """Each request's LoRA device slot (its adapter copied in if needed); None when no request
    uses an adapter."""
    lora = getattr(runner, "lora", None)
    if lora is None or all(r.lora is None for r in reqs):
        return None
    return lora.assign([r.lora for r in reqs])
