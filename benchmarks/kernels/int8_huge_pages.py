"""Batch-1 int8 products (FBGEMM, prepacked weights) with and without glibc's huge-page malloc.

torch's allocator puts fp32 weights on transparent huge pages (``THP_MEM_ALLOC_ENABLE``), but
FBGEMM allocates its prepacked int8 weights with malloc; the server starts its weight-loading
processes with ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` for them (``radixlm/_env.py``). Each round
runs one child process per setting (the tunable is read when a process starts), alternating; each
child streams ``--layers`` prepacked 8192x2048 int8 layers (more than the L3 cache) at batch 1 and
prints the weight bytes read per second, and how many MB of them lie on huge pages.

    python -m benchmarks.kernels.int8_huge_pages [--rounds 3] [--layers 24]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import time
from pathlib import Path

from benchmarks.harness import child_env, module_command
from radixlm._env import with_huge_page_malloc


def child(layers: int) -> dict:
    import warnings

    import torch  # after radixlm._env (imported above): the thread policy is set

    warnings.filterwarnings("ignore", message=".*quantized tensor creation.*")
    torch.set_num_threads(2)

    def huge_mb() -> int:
        rollup = Path("/proc/self/smaps_rollup").read_text()
        return int(re.search(r"AnonHugePages:\s+(\d+)", rollup).group(1)) // 1024

    packs = []
    before = huge_mb()
    for _ in range(layers):
        w = torch.randn(8192, 2048)
        q = torch.quantize_per_channel(
            w, w.abs().amax(1) / 127, torch.zeros(8192, dtype=torch.long), 0, torch.qint8
        )
        packs.append(torch.ops.quantized.linear_prepack(q, None))
        del w, q
    on_huge = huge_mb() - before
    x = torch.randn(1, 2048)
    times = []
    for _ in range(8):
        t0 = time.perf_counter()
        for packed in packs:
            torch.ops.quantized.linear_dynamic(x, packed, True)
        times.append(time.perf_counter() - t0)
    return {
        "gb_s": layers * 8192 * 2048 / statistics.median(times[2:]) / 1e9,
        "huge_page_mb": on_huge,
        "weight_mb": layers * 8192 * 2048 >> 20,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.layers)))
        return
    settings = {
        "4 KB pages": os.environ.get("GLIBC_TUNABLES", ""),
        "huge-page malloc": with_huge_page_malloc(os.environ.get("GLIBC_TUNABLES")),
    }
    results: dict[str, list[dict]] = {name: [] for name in settings}
    for _ in range(args.rounds):
        for name, tunables in settings.items():
            out = subprocess.run(
                module_command(__spec__.name, "--child", "--layers", str(args.layers)),
                capture_output=True,
                text=True,
                check=True,
                env=child_env(GLIBC_TUNABLES=tunables),
            )
            results[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    for name, runs in results.items():
        rates = ", ".join(f"{r['gb_s']:.1f}" for r in runs)
        print(
            f"{name:17s}: {rates} GB/s (median {statistics.median(r['gb_s'] for r in runs):.1f}); "
            f"{runs[-1]['huge_page_mb']} of {runs[-1]['weight_mb']} MB of int8 weights on huge pages"
        )


if __name__ == "__main__":
    main()
