"""A/B, in one process, of the decode step's glue before and after the lean-step changes of issue 26:
the q/k/v split (five ops -> two), the KV write's no-op dtype casts, the decode-attention checks of
the step's shared tensors in every layer (-> in the first), and the greedy argmax (torch's, which
opens an OpenMP region over a 49152-token row, -> numpy's for small fp32 CPU batches).

"before" patches the earlier forms back in; the rounds alternate, so a change in the machine's load
hits both. Reported at batch 1: the whole step (wall), the step with the GGUF products stubbed out
(what is left is the step's non-product time; wall and this thread's CPU time, the steadier one on
a loaded machine; GGUF models only) and the argmax of one row of logits.

    python -m benchmarks.kernels.decode_glue_ab --model /tmp/llama-1.5b-q4_0.gguf [--iters 30]
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable, Iterator

import radixlm._env  # noqa: F401  (thread policy before torch)  # isort: skip
import torch

from benchmarks.harness import interleaved_ms
from benchmarks.kernels.decode_step import add_step_arguments, decode_batch, step_runner
from radixlm.kernels.gguf_linear import GGUFProduct
from radixlm.runtime.attention.torch_decode import DecodePlan
from radixlm.runtime.layers.quantized_linear import GGUFLinear
from radixlm.runtime.memory.kv_pool import KVPool
from radixlm.runtime.models.llama import LlamaAttention
from radixlm.runtime.sampling import sampler


def _split_qkv_before(self: LlamaAttention, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    q, k, v = self.qkv_proj(x).split(self.split_sizes, dim=-1)
    q = q.view(-1, self.num_heads, self.head_dim)
    k = k.view(-1, self.num_kv_heads, self.head_dim)
    v = v.view(-1, self.num_kv_heads, self.head_dim)
    if self.q_norm is not None and self.k_norm is not None:
        q, k = self.q_norm(q), self.k_norm(k)
    return q, k, v


def _store_before(self: KVPool, layer_id: int, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    self.k_buffers[layer_id].index_copy_(0, loc, k.to(self.dtype))
    self.v_buffers[layer_id].index_copy_(0, loc, v.to(self.dtype))


@contextlib.contextmanager
def before() -> Iterator[None]:
    """The earlier forms patched in for the duration."""
    saved = (LlamaAttention.project_qkv, KVPool.store, sampler.NUMPY_ARGMAX_ROWS)
    LlamaAttention.project_qkv, KVPool.store = _split_qkv_before, _store_before  # type: ignore[method-assign]
    sampler.NUMPY_ARGMAX_ROWS = 0  # every batch takes torch's argmax, as before
    DecodePlan.checked = property(lambda self: False, lambda self, value: None)  # type: ignore[assignment]
    try:
        yield
    finally:
        DecodePlan.checked = False  # the dataclass field's default
        LlamaAttention.project_qkv, KVPool.store, sampler.NUMPY_ARGMAX_ROWS = saved  # type: ignore[method-assign]


@contextlib.contextmanager
def stubbed_products() -> Iterator[None]:
    """GGUF products return a zero output of their shape at once (allocated once per shape)."""
    outputs: dict[tuple[int, int], torch.Tensor] = {}

    def stub(self: GGUFProduct, x: torch.Tensor) -> torch.Tensor:
        key = (x.shape[0], int(self.blocks.shape[0]))
        if key not in outputs:
            outputs[key] = torch.zeros(key)
        return outputs[key]

    real = GGUFProduct.__call__
    GGUFProduct.__call__ = stub  # type: ignore[method-assign]
    try:
        yield
    finally:
        GGUFProduct.__call__ = real  # type: ignore[method-assign]


def ab(
    fn: Callable[[], object], iters: int, clock: Callable[[], float] = time.perf_counter
) -> tuple[float, float]:
    """Median ms of ``fn`` before and after, in alternating rounds."""

    def old() -> object:
        with before():
            return fn()

    a, b = interleaved_ms([old, fn], iters, clock)
    return a, b


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    add_step_arguments(ap, batch_sizes="1")
    args = ap.parse_args()
    runner, _ = step_runner(args)
    fb = decode_batch(runner, 1, args.context)
    step = lambda: runner.forward(fb)  # noqa: E731
    rows = [("step (wall)", *ab(step, args.iters))]
    if any(isinstance(m, GGUFLinear) for m in runner.model.modules()):
        with stubbed_products():
            rows.append(("step, products stubbed (wall)", *ab(step, 20 * args.iters)))
            rows.append(("step, products stubbed (CPU)", *ab(step, 20 * args.iters, time.thread_time)))
    logits = torch.randn(1, runner.vocab_size)
    rows.append(("greedy argmax of one row", *ab(lambda: sampler.row_argmax(logits), 200 * args.iters)))
    for name, old, new in rows:
        print(f"{name:32s} before {old:8.3f} ms  after {new:8.3f} ms  saved {old - new:7.3f} ms", flush=True)


if __name__ == "__main__":
    main()
