"""Time and profile the engine's decode step (``ModelRunner.forward`` on paged decode batches).

For each batch size: the median step time, the time of the step's matrix products alone (the same
products, or on a quantized model its quantized layers, on inputs of the step's shape; the two timed
in alternating rounds, so their ratio holds on a machine whose speed drifts), and
optionally the torch profiler's top ops (the GGUF kernels show there as the rest, not as ``aten::mm``).

    python -m benchmarks.kernels.decode_step --batch-sizes 1,8,64 --context 32 --profile [--json PATH]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import radixlm._env  # noqa: F401  (thread policy before torch)  # isort: skip
import torch

from benchmarks.harness import add_json_argument, interleaved_ms, median_ms, write_results
from radixlm.kernels.cpu.build import DECODE_KERNELS, load_decode_kernels
from radixlm.runtime.executor.forward_batch import ForwardBatch, ForwardMode
from radixlm.runtime.executor.model_runner import ModelRunner
from radixlm.runtime.layers.linear import Linear
from radixlm.runtime.layers.quantized_linear import GGUFLinear, Int8Linear
from radixlm.runtime.server_args import ServerArgs

MATMUL_OPS = ("aten::mm", "aten::addmm", "mkldnn::_linear_pointwise")


def decode_batch(runner: ModelRunner, bs: int, context: int) -> ForwardBatch:
    """``bs`` requests with ``context`` cached tokens each, decoding one token at position ``context``."""
    rows, slots = [], []
    for _ in range(bs):
        row = runner.req_to_token_pool.alloc()
        assert row is not None, "raise --max-running-requests"
        loc = runner.kv_pool.allocator.alloc(context + 1)
        assert loc is not None, "KV pool too small"
        runner.req_to_token_pool.write(row, 0, loc)
        rows.append(row)
        slots.append(int(loc[-1]))
    seq_lens = [context + 1] * bs
    return ForwardBatch(
        mode=ForwardMode.DECODE,
        input_ids=torch.randint(0, runner.vocab_size, (bs,)),
        positions=torch.full((bs,), context, dtype=torch.int64),
        req_pool_indices=torch.tensor(rows, dtype=torch.int64),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int64),
        extend_prefix_lens=torch.full((bs,), context, dtype=torch.int64),
        extend_seq_lens=torch.ones(bs, dtype=torch.int64),
        out_cache_loc=torch.tensor(slots, dtype=torch.int64),
        logits_indices=torch.arange(bs),
        req_to_token_pool=runner.req_to_token_pool,
        kv_pool=runner.kv_pool,
        attn_backend=runner.attn_backend,
        seq_lens_cpu=seq_lens,
    )


def add_step_arguments(
    ap: argparse.ArgumentParser, batch_sizes: str = "1,8,64", iters: int = 30, quantization: str = "auto"
) -> None:
    """The arguments of every decode-step benchmark: the model, its batches and how often to time."""
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--batch-sizes", default=batch_sizes)
    ap.add_argument("--context", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quantization", default=quantization, help="as radixlm serve's --quantization")
    ap.add_argument("--kv-cache-dtype", default="auto", help="as radixlm serve's --kv-cache-dtype")
    ap.add_argument("--iters", type=int, default=iters)


def step_runner(args: argparse.Namespace) -> tuple[ModelRunner, list[int]]:
    """A model runner for ``add_step_arguments``' arguments, with room for the largest batch, and
    the batch sizes."""
    sizes = [int(s) for s in args.batch_sizes.split(",")]
    runner = ModelRunner(
        ServerArgs(
            model=args.model,
            num_threads=args.threads,
            quantization=args.quantization,
            kv_cache_dtype=args.kv_cache_dtype,
            max_running_requests=max(sizes) + 1,
            max_total_tokens=max(sizes) * (args.context + 2) + 16,
        )
    )
    return runner, sizes


def free_batch(runner: ModelRunner, fb: ForwardBatch) -> None:
    """Give a ``decode_batch``'s rows and KV slots back."""
    for row in fb.req_pool_indices.tolist():
        runner.req_to_token_pool.free(row)
    runner.kv_pool.allocator.clear()


def matmul_calls(model: torch.nn.Module) -> list[tuple[Callable[[torch.Tensor], torch.Tensor], int]]:
    """``(product, in_features)`` for every matrix product of a decode step, LM head included once:
    the quantized layers themselves on a quantized model (their own kernels), else the float layers
    as the model calls them (``layers.linear.linear``: the small-batch kernel, the packed product or
    ``F.linear``)."""
    quantized = [(m, m.in_features) for m in model.modules() if isinstance(m, (GGUFLinear, Int8Linear))]
    if quantized:
        return quantized
    head = model.lm_head
    layers = [(m, m.weight.shape[1]) for m in model.modules() if isinstance(m, Linear) and m is not head]
    return [*layers, (head.project, head.weight.shape[1])]


def matmul_fn(model: torch.nn.Module, bs: int) -> Callable[[], None]:
    """One decode step's matrix products alone, on random inputs of ``bs`` rows."""
    calls = matmul_calls(model)
    inputs = [torch.randn(bs, k) for _, k in calls]

    def run() -> None:
        with torch.inference_mode():
            for (product, _), x in zip(calls, inputs):
                product(x)

    return run


def ab_step_ms(runner: ModelRunner, fb: ForwardBatch, iters: int, rounds: int = 6) -> tuple[float, float]:
    """Median step time with the C++ decode kernels (attention, norm, rotary, small-batch fp32
    products, silu_and_mul) and without them (the torch ops they replace), alternating rounds so
    that a change in the machine's load hits both."""
    times: dict[bool, list[float]] = {True: [], False: []}
    per_round = max(2, iters // rounds)
    kernels = load_decode_kernels()
    for _ in range(rounds):
        for use in (True, False):
            with DECODE_KERNELS.replaced(kernels if use else None):
                times[use].append(median_ms(lambda: runner.forward(fb), per_round))
    return statistics.median(times[True]), statistics.median(times[False])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    add_step_arguments(ap)
    ap.add_argument("--profile", action="store_true", help="print the torch profiler's top ops")
    ap.add_argument(
        "--ab",
        action="store_true",
        help="also time the step with the C++ decode kernels off (torch ops), interleaved",
    )
    ap.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile (inductor) the model's forward first; reports compile time",
    )
    add_json_argument(ap)
    args = ap.parse_args()
    rows = []
    runner, sizes = step_runner(args)
    eager_forward = runner.model.forward
    for bs in sizes:
        fb = decode_batch(runner, bs, args.context)
        if args.compile:  # one compiled graph per batch size (dynamic=False), as a bucketed runner would
            runner.model.forward = torch.compile(eager_forward, dynamic=False)
            t0 = time.perf_counter()
            runner.forward(fb)
            print(f"batch {bs:3d}: compiled in {time.perf_counter() - t0:.1f} s", flush=True)
        fns = [lambda fb=fb: runner.forward(fb), matmul_fn(runner.model, bs)]
        step, mm = interleaved_ms(fns, args.iters)
        cpu_step, cpu_mm = interleaved_ms(fns, args.iters, time.process_time)
        print(
            f"batch {bs:3d}: step {step:7.2f} ms, matmuls {mm:7.2f} ms, step/matmul {step / mm:.2f}; "
            f"CPU time: step {cpu_step:7.2f} ms, matmuls {cpu_mm:7.2f} ms, "
            f"step/matmul {cpu_step / cpu_mm:.2f}",
            flush=True,
        )
        rows.append(
            {"batch": bs, "step_ms": step, "matmul_ms": mm, "cpu_step_ms": cpu_step, "cpu_matmul_ms": cpu_mm}
        )
        if args.ab:
            with_kernels, torch_ops = ab_step_ms(runner, fb, args.iters)
            print(
                f"batch {bs:3d}: A/B interleaved: step with C++ decode kernels {with_kernels:7.2f} ms, "
                f"with torch ops {torch_ops:7.2f} ms ({torch_ops / with_kernels:.2f}x)",
                flush=True,
            )
            rows[-1].update(ab_with_kernels_ms=with_kernels, ab_torch_ops_ms=torch_ops)
        if args.profile:
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(5):
                    runner.forward(fb)
            events = prof.key_averages()
            total = sum(e.self_cpu_time_total for e in events) / 5000
            mm = sum(e.self_cpu_time_total for e in events if e.key in MATMUL_OPS) / 5000
            print(events.table(sort_by="self_cpu_time_total", row_limit=14), flush=True)
            print(
                f"batch {bs:3d} profile: ops {total:.2f} ms a step, matmuls {mm:.2f}, "
                f"the rest {total - mm:.2f} ms",
                flush=True,
            )
        free_batch(runner, fb)
    headline = [
        {"label": f"batch {r['batch']}", "metric": "decode step ms", "value": r["step_ms"]} for r in rows
    ]
    write_results(args.json, __spec__.name, headline, rows)


if __name__ == "__main__":
    main()
