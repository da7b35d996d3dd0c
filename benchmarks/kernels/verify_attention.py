"""A speculative verify step's decode attention: R rows of one request (its draft positions, each one
key longer) read row by row against read as one row group (``decode_attention.cpp``), beside a plain
decode's one row; SmolLM2-135M's shapes (9 query heads, 3 KV heads, head_dim 64) over a
1,867-token context (the doc-quote workload), fp32 KV. Times alternate and the best of the
repeats is kept (a shared box); the ratios are the figure. ``--rev REV`` also times the grouped call
with a git revision's decode kernels (built beside the working tree's, as ``decode_kernels_ab`` does)
and checks both give the same bits.

    PYTHONPATH=$PWD python -m benchmarks.kernels.verify_attention --threads 2
    PYTHONPATH=$PWD python -m benchmarks.kernels.verify_attention --threads 1 --rows 1,6 --rev HEAD
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
    ap.add_argument("--rev", help="also time this git revision's kernels (grouped)")
    args = ap.parse_args()
    kernels = load_decode_kernels()
    assert kernels is not None, "the C++ decode kernels did not build"
    variants = {"by_row": (kernels, False), "grouped": (kernels, True)}
    if args.rev:
        from benchmarks.kernels.decode_kernels_ab import kernels_at

        variants["rev_grouped"] = (kernels_at(args.rev), True)
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

        best = dict.fromkeys(variants, float("inf"))
        for _ in range(args.repeats):
            for name, (kern, grouped) in variants.items():
                gr = groups if grouped else None
                t = time.perf_counter()
                for _ in range(args.calls):
                    kern.paged_decode_attention(*step, 0.125, args.threads, row_groups=gr)
                best[name] = min(best[name], (time.perf_counter() - t) / args.calls)
        plain = plain if plain is not None else best["by_row"]
        row = {
            "rows": r,
            "by_row_us": round(best["by_row"] * 1e6),
            "grouped_us": round(best["grouped"] * 1e6),
            "grouped_speedup": round(best["by_row"] / best["grouped"], 2),
            "grouped_vs_one_row": round(best["grouped"] / plain, 2),
        }
        if args.rev:
            theirs = variants["rev_grouped"][0].paged_decode_attention(*step, 0.125, 1, row_groups=groups)
            row["rev_grouped_us"] = round(best["rev_grouped"] * 1e6)
            row["speedup_over_rev"] = round(best["rev_grouped"] / best["grouped"], 2)
            row["same_bits_as_rev"] = torch.equal(
                theirs, kernels.paged_decode_attention(*step, 0.125, 1, row_groups=groups)
            )
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
