"""The decode step with the runtime's modules called as ``layers.module.Module`` calls them (their
``forward`` directly) against ``nn.Module.__call__`` (hook dispatch), in alternating rounds of one
process, on the default model (or ``--model``).

    python -m benchmarks.kernels.module_call_ab [--batch-sizes 1,8,64] [--context 32] [--quantization auto]
"""

from __future__ import annotations

import argparse
import statistics
import time

import radixlm._env  # noqa: F401  (thread policy before torch)  # isort: skip
from torch import nn

from benchmarks.harness import median_ms
from benchmarks.kernels.decode_step import add_step_arguments, decode_batch, free_batch, step_runner
from radixlm.runtime.executor.forward_batch import ForwardBatch
from radixlm.runtime.executor.model_runner import ModelRunner
from radixlm.runtime.layers.module import Module


def ab_ms(runner: ModelRunner, fb: ForwardBatch, iters: int, clock, rounds: int = 6) -> tuple[float, float]:
    """Median step times: (direct calls, ``nn.Module.__call__``), alternating rounds."""
    direct = Module.__call__
    times: dict[bool, list[float]] = {True: [], False: []}
    try:
        for _ in range(rounds):
            for use_direct in (True, False):
                Module.__call__ = direct if use_direct else nn.Module.__call__  # type: ignore[method-assign]
                step_ms = median_ms(lambda: runner.forward(fb), max(2, iters // rounds), clock)
                times[use_direct].append(step_ms)
    finally:
        Module.__call__ = direct  # type: ignore[method-assign]
    return statistics.median(times[True]), statistics.median(times[False])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    add_step_arguments(ap, iters=120)
    args = ap.parse_args()
    runner, sizes = step_runner(args)
    for bs in sizes:
        fb = decode_batch(runner, bs, args.context)
        for name, clock in (("wall", time.perf_counter), ("CPU time", time.process_time)):
            direct, hooked = ab_ms(runner, fb, args.iters, clock)
            print(
                f"batch {bs:3d} ({name}): direct calls {direct:7.2f} ms, nn.Module.__call__ "
                f"{hooked:7.2f} ms ({hooked / direct:.3f}x)",
                flush=True,
            )
        free_batch(runner, fb)


if __name__ == "__main__":
    main()
