"""The fp32 small-batch product (``kernels/cpu/small_batch_linear.cpp``) against torch's ``F.linear``
on the default model's shapes and on LM heads, alternating the two in one process; and the read
bandwidth of a batch-1 product over 538 MB of weights (the fp32 model's size) beside a plain
``sum`` of the same tensor (what streaming the memory costs at all).

    python -m benchmarks.kernels.small_batch_linear
"""

from __future__ import annotations

import argparse
import statistics

import radixlm._env  # noqa: F401  (thread policy, huge pages, before torch)  # isort: skip
import torch
import torch.nn.functional as F

from benchmarks.harness import median_ms
from radixlm.kernels.cpu.build import load_decode_kernels

MODEL_SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]  # SmolLM2-135M: qkv, o, gate_up, down
HEAD_SHAPES = [(49152, 576), (32000, 2048), (151936, 896)]
MODEL_BYTES = 538_000_000


def compare(n: int, k: int, rows: int, kernels) -> str:
    w, x = torch.randn(n, k), torch.randn(rows, k)
    reps = max(5, int(2e8 / (n * k * 4)))
    ours, theirs = [], []
    for _ in range(3):  # alternate, so a change in the machine's load hits both
        theirs.append(median_ms(lambda: F.linear(x, w), reps))
        ours.append(median_ms(lambda: kernels.small_batch_linear(x, w), reps))
    a, b = statistics.median(theirs), statistics.median(ours)
    return f"| {n}x{k} | {rows} | {a:.3f} | {b:.3f} | {a / b:.2f}x |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", default="1,2,4,8,16,32,64")
    ap.add_argument("--head-rows", default="1,17,64,128")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    kernels = load_decode_kernels()
    if kernels is None:
        raise SystemExit("the CPU decode kernels cannot be built here")
    print("| weight (out x in) | rows | F.linear ms | ours ms | speedup |\n|---|---:|---:|---:|---:|")
    for n, k in MODEL_SHAPES:
        for rows in map(int, args.rows.split(",")):
            print(compare(n, k, rows, kernels), flush=True)
    for n, k in HEAD_SHAPES:
        for rows in map(int, args.head_rows.split(",")):
            print(compare(n, k, rows, kernels), flush=True)
    w = torch.randn(MODEL_BYTES // 4 // 576, 576)
    x = torch.randn(1, 576)
    for name, fn in (
        ("sum", w.sum),
        ("F.linear, 1 row", lambda: F.linear(x, w)),
        ("small_batch_linear, 1 row", lambda: kernels.small_batch_linear(x, w)),
    ):
        print(f"{name} over {w.numel() * 4 / 1e6:.0f} MB: {w.numel() * 4 / median_ms(fn, 7) / 1e6:.1f} GB/s")


if __name__ == "__main__":
    main()
