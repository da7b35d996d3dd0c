"""CUDA graphs for decode: capture one graph per batch-size bucket, replay with padded inputs.

A decode step launches hundreds of small kernels; replaying a captured graph removes their launch
cost. Inputs live in static buffers; a batch of size ``bs`` runs the graph of the smallest bucket
``>= bs``, its padding rows pointing at the dummy ``req_to_token`` row 0 and writing their K/V into
the dummy slot 0 (both reserved by the pools, never handed to requests).
"""

from __future__ import annotations

import bisect
from typing import Any

import torch

from radixlm.runtime.executor.forward_batch import ForwardBatch, ForwardMode


def batch_size_buckets(max_bs: int) -> list[int]:
    """1, 2, 4, 8, 16, then every 8 up to ``max_bs`` (which is always the last bucket)."""
    buckets = [b for b in (1, 2, 4, 8) if b < max_bs] + list(range(16, max_bs, 8))
    return buckets + [max_bs]


class CudaGraphRunner:
    """Captures decode graphs for ``model_runner`` (``model``, pools, ``attn_backend``, ``device``).

    ``can_run(fb)`` says whether a batch fits a captured graph; ``replay(fb)`` runs it and returns
    the logits ``[bs, vocab]`` (a view of a static buffer, valid until the next replay).
    """

    def __init__(self, model_runner: Any, max_bs: int = 160) -> None:
        self.runner = model_runner
        self.device = torch.device(model_runner.device)
        max_bs = max(1, min(max_bs, model_runner.req_to_token_pool.size))
        self.buckets = batch_size_buckets(max_bs)
        self.max_bs = self.buckets[-1]
        # NOTE: the bound for every host-side length: graphs must not depend on this step's lengths.
        self.max_seq_len = int(model_runner.req_to_token_pool.max_context_len)
        self._inputs = self._static_inputs(self.max_bs)
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self._outputs: dict[int, torch.Tensor] = {}
        self._pool = torch.cuda.graph_pool_handle()
        self.capture()

    def _static_inputs(self, n: int) -> dict[str, torch.Tensor]:
        """Buffers filled with the padding values (dummy row 0, dummy slot 0, length 1)."""

        def full(value: int) -> torch.Tensor:
            return torch.full((n,), value, dtype=torch.int64, device=self.device)

        return {
            "input_ids": full(0),
            "positions": full(0),
            "req_pool_indices": full(0),
            "seq_lens": full(1),
            "extend_prefix_lens": full(0),
            "extend_seq_lens": full(1),
            "out_cache_loc": full(0),
            "logits_indices": torch.arange(n, dtype=torch.int64, device=self.device),
        }

    def _batch(self, bs: int) -> ForwardBatch:
        """A decode batch over the first ``bs`` entries of the static buffers."""
        inp = {name: buf[:bs] for name, buf in self._inputs.items()}
        r = self.runner
        return ForwardBatch(
            mode=ForwardMode.DECODE,
            **inp,
            req_to_token_pool=r.req_to_token_pool,
            kv_pool=r.kv_pool,
            attn_backend=r.attn_backend,
            seq_lens_cpu=[self.max_seq_len] * bs,
            extend_prefix_lens_cpu=[self.max_seq_len - 1] * bs,
            extend_seq_lens_cpu=[1] * bs,
        )

    def _run_model(self, fb: ForwardBatch) -> torch.Tensor:
        self.runner.attn_backend.init_forward_metadata(fb)
        return self.runner.model(fb)

    @torch.inference_mode()
    def capture(self) -> None:
        """Capture every bucket, largest first, so smaller graphs reuse its memory pool."""
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for bs in reversed(self.buckets):
                fb = self._batch(bs)
                for _ in range(2):  # warm up: Triton compiles, cuBLAS picks its kernels
                    self._run_model(fb)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=self._pool, stream=stream):
                    self._outputs[bs] = self._run_model(fb)
                self._graphs[bs] = graph
        torch.cuda.current_stream(self.device).wait_stream(stream)
        torch.cuda.synchronize(self.device)

    def can_run(self, fb: ForwardBatch) -> bool:
        """A decode batch of at most ``max_bs`` requests, one logits row each, on our pools."""
        return (
            fb.is_decode
            and 0 < fb.batch_size <= self.max_bs
            and int(fb.logits_indices.shape[0]) == fb.batch_size
            and fb.kv_pool is self.runner.kv_pool
            and fb.req_to_token_pool is self.runner.req_to_token_pool
        )

    @torch.inference_mode()
    def replay(self, fb: ForwardBatch) -> torch.Tensor:
        """Copy ``fb`` into the static buffers, pad to the bucket, replay; logits ``[bs, vocab]``."""
        bs = fb.batch_size
        bucket = self.buckets[bisect.bisect_left(self.buckets, bs)]
        inp = self._inputs
        for name in ("input_ids", "positions", "req_pool_indices", "seq_lens", "out_cache_loc"):
            inp[name][:bs].copy_(getattr(fb, name), non_blocking=True)
        if bucket > bs:
            for name in ("input_ids", "positions", "req_pool_indices", "out_cache_loc"):
                inp[name][bs:bucket].zero_()
            inp["seq_lens"][bs:bucket].fill_(1)
        torch.sub(inp["seq_lens"][:bucket], 1, out=inp["extend_prefix_lens"][:bucket])
        self._graphs[bucket].replay()
        # A copy: the next replay of this bucket overwrites its output buffer, and callers keep
        # logits across steps (logprobs, tests comparing runs). One [bs, vocab] copy per step.
        return self._outputs[bucket][:bs].clone()
