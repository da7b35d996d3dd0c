"""A speculative verify step's decode attention: R rows of one request (its draft positions, each one
key longer) read row by row against read as one row group (``decode_attention.cpp``), beside a plain
decode's one row; SmolLM2-135M's shapes (9 query heads, 3 KV heads, head_dim 64) over a
1,867-token context (the doc-quote workload), fp32 KV. Times alternate and the best of the
repeats is kept (a shared box); the ratios are the figure.

    PYTHONPATH=$PWD python -m benchmarks.kernels.verify_attention --threads 2
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from radixlm.kernels.cpu.build import load_decode_kernels
from radixlm.kernels.cpu.row_groups import RowGroups


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--context", type=int, default=1867)
    ap.add_argument("--rows", default="1,2,3,5,7")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()
    kernels = load_decode_kernels()
    assert kernels is not None, "the C++ decode kernels did not build"
    g = torch.Generator().manual_seed(0)
    slots = 30 * 4096  # a pool the size of 30 layers' worth of the context, rows scattered in it
    k = torch.randn(slots, 3, 64, generator=g)
    v = torch.randn(slots, 3, 64, generator=g)
    table = torch.randperm(slots, generator=g)[: 2 * 4096].view(2, 4096).contiguous()
    plain: float | None = None
    for r in (int(x) for x in args.rows.split(",")):
        rows = [0] * r
        lens = [args.context + j for j in range(r)]
        step = (torch.randn(r, 9, 64, generator=g), k, v, table, torch.tensor(rows), torch.tensor(lens), lens)
        groups = RowGroups.of([r], rows)

        best = {"by_row": float("inf"), "grouped": float("inf")}
        for _ in range(args.repeats):
            for name, gr in (("by_row", None), ("grouped", groups)):
                t = time.perf_counter()
                for _ in range(args.calls):
                    kernels.paged_decode_attention(*step, 0.125, args.threads, row_groups=gr)
                best[name] = min(best[name], (time.perf_counter() - t) / args.calls)
        plain = plain if plain is not None else best["by_row"]
        print(
            json.dumps(
                {
                    "rows": r,
                    "by_row_us": round(best["by_row"] * 1e6),
                    "grouped_us": round(best["grouped"] * 1e6),
                    "grouped_speedup": round(best["by_row"] / best["grouped"], 2),
                    "grouped_vs_one_row": round(best["grouped"] / plain, 2),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
