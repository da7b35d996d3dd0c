"""The scheduler's prefill-only path: embed or score whole sequences, keeping no KV afterwards.

A decoder (Llama family) runs its sequences as one extend batch over fresh KV slots and rows (as
many sequences as ``max_prefill_tokens`` and the free rows allow per forward), then frees them: an
embedding request leaves nothing in the pool. An encoder runs its own padded, bidirectional forward.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from radixlm.runtime.executor.forward_batch import ForwardBatch, ForwardMode
from radixlm.runtime.messages import EncodeOut, EncodeReq
from radixlm.runtime.models.llama_pooled import final_hidden
from radixlm.runtime.pooling.pool import finish, pool_packed, pool_padded
from radixlm.runtime.pooling.pooling_config import PoolingConfig


class EncodeStep:
    """Answers ``EncodeReq`` for one model runner; the scheduler calls ``run`` between steps."""

    def __init__(self, runner: Any, cache: Any, max_tokens: int) -> None:
        self.runner = runner
        self.cache = cache
        self.max_tokens = max(int(max_tokens), 1)
        self.is_encoder = bool(getattr(runner.model, "is_encoder", False))
        loaded = runner.loaded
        self.pooling = PoolingConfig.from_checkpoint(loaded.model_path, loaded.hf_config, self.is_encoder)

    @torch.inference_mode()
    def run(self, msg: EncodeReq) -> EncodeOut:
        """The vectors of ``msg``'s sequences, in order; an ``EncodeOut`` with ``error`` on bad input."""
        problem = self._check(msg)
        if problem:
            return EncodeOut(msg.rid, error=problem)
        types = msg.token_type_ids or [[0] * len(ids) for ids in msg.input_ids]
        order = list(range(len(msg.input_ids)))
        if self.is_encoder:  # it pads a batch to its longest sequence: batch similar lengths together
            order.sort(key=lambda i: len(msg.input_ids[i]))
        all_ids, all_types = [msg.input_ids[i] for i in order], [types[i] for i in order]
        chunks = []
        for lo, hi in self._batches([len(ids) for ids in all_ids]):
            ids, tts = all_ids[lo:hi], all_types[lo:hi]
            chunks.append(
                self._encoder(ids, tts, msg.kind) if self.is_encoder else self._decoder(ids, msg.kind)
            )
        sorted_out = torch.cat(chunks)
        out = torch.empty_like(sorted_out)
        out[torch.tensor(order)] = sorted_out
        if msg.kind == "embed":
            out = finish(out, self.pooling.normalize, msg.dimensions)
        return EncodeOut(msg.rid, out.tolist())

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
        longest = max((len(ids) for ids in msg.input_ids), default=0)
        if not self.is_encoder and longest > self.cache.capacity:
            return f"input: {longest} tokens do not fit into the KV pool ({self.cache.capacity} slots)"
        return ""

    def _batches(self, lens: list[int]) -> Iterator[tuple[int, int]]:
        """Consecutive ranges of at most ``max_tokens`` tokens (at least one sequence each) and, for a
        decoder, at most the free ``req_to_token`` rows."""
        rows = len(lens) if self.is_encoder else max(self.runner.req_to_token_pool.available_size(), 1)
        lo = 0
        while lo < len(lens):
            hi, total = lo, 0
            while hi < len(lens) and hi - lo < rows and (hi == lo or total + lens[hi] <= self.max_tokens):
                total += lens[hi]
                hi += 1
            yield lo, hi
            lo = hi

    def _encoder(self, ids: list[list[int]], types: list[list[int]], kind: str) -> torch.Tensor:
        device = self.runner.device
        width = max(len(s) for s in ids)
        tokens = torch.zeros((len(ids), width), dtype=torch.int64)
        type_ids = torch.zeros_like(tokens)
        for i, (seq, tt) in enumerate(zip(ids, types, strict=True)):
            tokens[i, : len(seq)] = torch.tensor(seq)
            type_ids[i, : len(tt)] = torch.tensor(tt)
        lens = torch.tensor([len(s) for s in ids], device=device)
        model = self.runner.model
        tokens, type_ids = tokens.to(device), type_ids.to(device)
        if kind == "classify":
            return model.classify(tokens, type_ids, lens)
        return pool_padded(model(tokens, type_ids, lens), lens, self.pooling.method)

    def _decoder(self, ids: list[list[int]], kind: str) -> torch.Tensor:
        lens = [len(s) for s in ids]
        slots = self.cache.alloc_slots(sum(lens))
        if slots is None:
            raise RuntimeError("the KV pool has no room for an embedding batch")
        pool = self.runner.req_to_token_pool
        rows = [pool.alloc() for _ in ids]
        try:
            start = 0
            for row, n in zip(rows, lens, strict=True):
                pool.write(row, 0, slots[start : start + n])
                start += n
            fb = self._forward_batch(ids, rows, slots, lens, last_only=kind == "classify")
            self.runner.attn_backend.init_forward_metadata(fb)
            if kind == "classify":
                return self.runner.model(fb)
            return pool_packed(final_hidden(self.runner.model, fb), lens, self.pooling.method)
        finally:  # nothing stays: the slots go back to the free list, the rows to the pool
            self.cache.allocator.free(slots)
            for row in rows:
                pool.free(row)

    def _forward_batch(
        self, ids: list[list[int]], rows: list[int], slots: torch.Tensor, lens: list[int], last_only: bool
    ) -> ForwardBatch:
        device, runner = self.runner.device, self.runner

        def tensor(values: list[int]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.int64, device=device)

        ends = torch.tensor(lens).cumsum(0) - 1
        return ForwardBatch(
            mode=ForwardMode.EXTEND,
            input_ids=tensor([t for seq in ids for t in seq]),
            positions=torch.cat([torch.arange(n, dtype=torch.int64) for n in lens]).to(device),
            req_pool_indices=tensor(rows),
            seq_lens=tensor(lens),
            extend_prefix_lens=tensor([0] * len(lens)),
            extend_seq_lens=tensor(lens),
            out_cache_loc=slots.to(device),
            logits_indices=ends.to(device) if last_only else torch.arange(sum(lens), device=device),
            req_to_token_pool=runner.req_to_token_pool,
            kv_pool=runner.kv_pool,
            attn_backend=runner.attn_backend,
            seq_lens_cpu=list(lens),
            extend_prefix_lens_cpu=[0] * len(lens),
            extend_seq_lens_cpu=list(lens),
        )
