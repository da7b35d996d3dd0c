"""The decode step's small elementwise ops: torch's against the ways the engine now does them.

Every torch CPU op large enough to go parallel opens an OpenMP region; under
``OMP_WAIT_POLICY=PASSIVE`` (radixlm's default, set by ``radixlm._env``, so that idle threads give the
cores back) each region first wakes the sleeping team. For the few KB of a decode step's KV write or
activation that wake-up is most of the op. Medians in microseconds, one process, 2 threads; compare a
row's columns, and the two policies by running the script under each:

    python -m benchmarks.kernels.small_ops                        # PASSIVE (the default)
    OMP_WAIT_POLICY=ACTIVE python -m benchmarks.kernels.small_ops # threads spin between regions
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

import radixlm._env  # noqa: F401  (thread policy before torch)  # isort: skip
import torch
import torch.nn.functional as F

from benchmarks.harness import median_ms
from radixlm.kernels.cpu.build import load_decode_kernels
from radixlm.kernels.cpu.decode_ops import DecodeKernels


def median_us(fn: Callable[[], object], iters: int) -> float:
    return 1000 * median_ms(fn, iters)


def row_of_table(rows: int, buf: torch.Tensor, kernels: DecodeKernels | None, iters: int) -> str:
    """One markdown row: the four ways, at ``rows`` tokens."""
    loc = torch.randperm(buf.shape[0] - 1)[:rows] + 1
    k = torch.randn(rows, *buf.shape[1:])
    gate_up = torch.randn(rows, 2 * 1536)  # SmolLM2's intermediate size

    def assign() -> None:
        buf[loc] = k

    def torch_silu() -> torch.Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        return F.silu(gate).mul_(up)

    fused = (
        f"{median_us(lambda: kernels.silu_and_mul(gate_up), iters):.1f}"
        if kernels is not None
        else "not built"
    )
    return (
        f"| {rows} | {median_us(assign, iters):.1f} | "
        f"{median_us(lambda: buf.index_copy_(0, loc, k), iters):.1f} | "
        f"{median_us(torch_silu, iters):.1f} | {fused} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", default="1,8,64", help="tokens in the step")
    ap.add_argument("--iters", type=int, default=2000)
    args = ap.parse_args()
    torch.set_num_threads(2)
    kernels = load_decode_kernels()
    print(f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}, torch {torch.__version__}, 2 threads")
    print("| rows | KV write buf[loc] = k | index_copy_ | silu(gate) * up (torch) | silu_and_mul kernel |")
    print("|---:|---:|---:|---:|---:|")
    buf = torch.zeros(200_001, 3, 64)  # SmolLM2's K pool of one layer: 3 kv heads of 64
    for rows in (int(r) for r in args.rows.split(",")):
        print(row_of_table(rows, buf, kernels, args.iters), flush=True)


if __name__ == "__main__":
    main()
