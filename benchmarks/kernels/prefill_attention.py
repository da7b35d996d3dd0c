"""Prefill attention on the CPU: torch's ``scaled_dot_product_attention`` with the extend path's mask
(what ``attend`` called before) against ``attend_blocked`` (``radixlm/kernels/blocked_attention.py``),
fp32, alternated rounds in one process; then, with ``--model``, a whole prefill of a long prompt on a
real model with the blocked path on and off.

    python -m benchmarks.kernels.prefill_attention [--blocks 32,64,128]
    python -m benchmarks.kernels.prefill_attention --model smollm2-135m --prompt-tokens 1867
"""

from __future__ import annotations

import argparse
import functools
import time

import radixlm._env  # noqa: F401  (thread policy before torch)  # isort: skip
import torch
import torch.nn.functional as F

from benchmarks.harness import add_json_argument, interleaved_ms, write_results
from radixlm.kernels import blocked_attention, windowed_attention
from radixlm.kernels.windowed_attention import visible

# (new tokens, cached prefix, query heads, kv heads, head size)
SHAPES = [
    (256, 0, 9, 3, 64),
    (512, 1536, 9, 3, 64),
    (1867, 0, 9, 3, 64),
    (4096, 0, 9, 3, 64),
    (1024, 0, 16, 8, 128),
    (2048, 0, 32, 8, 64),
]


def _blocked(size: int, *args: object) -> object:
    blocked_attention.QUERY_BLOCK = size
    return blocked_attention.attend_blocked(*args)  # type: ignore[arg-type]


def kernel_rows(blocks: list[int], iters: int) -> list[dict]:
    rows = []
    for queries, prefix, hq, hkv, dim in SHAPES:
        g = torch.Generator().manual_seed(queries + prefix)
        q = torch.randn(hq, queries, dim, generator=g)
        k = torch.randn(hkv, prefix + queries, dim, generator=g)
        v = torch.randn(hkv, prefix + queries, dim, generator=g)
        mask = visible(torch.arange(prefix, prefix + queries), torch.arange(prefix + queries), None)
        scale = dim**-0.5

        sdpa = functools.partial(
            F.scaled_dot_product_attention, q, k, v, attn_mask=mask, scale=scale, enable_gqa=hq != hkv
        )
        blocked = [functools.partial(_blocked, b, q, k, v, mask, scale) for b in blocks]
        times = interleaved_ms([sdpa, *blocked], iters)
        row = {"shape": f"{queries} new + {prefix} cached, {hq}/{hkv} heads x {dim}", "sdpa_ms": times[0]}
        for b, t in zip(blocks, times[1:]):
            row[f"block{b}_ms"] = t
            row[f"block{b}_speedup"] = times[0] / t
        rows.append(row)
        print(
            "  ".join(f"{k}={v:.2f}" if isinstance(v, float) else str(v) for k, v in row.items()), flush=True
        )
    return rows


def prefill_seconds(model: str, prompt_tokens: int, rounds: int) -> dict[str, float]:
    """One prompt's prefill, blocked on and off in alternating rounds (medians)."""
    from radixlm.runtime.messages import TokenizedGenerateReq
    from radixlm.runtime.sampling.sampling_params import SamplingParams
    from radixlm.runtime.scheduler.scheduler import Scheduler
    from radixlm.runtime.server_args import ServerArgs
    from radixlm.runtime.weights.model_registry import resolve_model

    sched = Scheduler(ServerArgs(model=resolve_model(model), disable_radix_cache=True))
    ids = [(i * 7919) % 20000 + 100 for i in range(prompt_tokens)]
    applies = blocked_attention.blocked_attention_applies
    times: dict[str, list[float]] = {"sdpa": [], "blocked": []}
    for i in range(2 * rounds + 1):
        mode = "blocked" if i % 2 else "sdpa"
        windowed_attention.blocked_attention_applies = applies if mode == "blocked" else (lambda q, m: False)
        sched.handle(TokenizedGenerateReq(f"p{i}", ids, SamplingParams(temperature=0, max_new_tokens=1)))
        start = time.perf_counter()
        while sched.has_work():
            sched.step()
        if i:  # the first call warms up
            times[mode].append(time.perf_counter() - start)
    windowed_attention.blocked_attention_applies = applies
    return {k: sorted(v)[len(v) // 2] for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--blocks", default="32,64,128", help="query block sizes to time")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--model", default=None, help="also time a whole prefill on this model")
    ap.add_argument("--prompt-tokens", type=int, default=1867)
    ap.add_argument("--rounds", type=int, default=3)
    add_json_argument(ap)
    args = ap.parse_args()
    blocks = [int(b) for b in args.blocks.split(",")]
    default_block = blocked_attention.QUERY_BLOCK
    rows = kernel_rows(blocks, args.iters)
    blocked_attention.QUERY_BLOCK = default_block
    headline = [
        {"label": row["shape"], "metric": "SDPA / blocked", "value": row[f"block{default_block}_speedup"]}
        for row in rows
        if f"block{default_block}_speedup" in row
    ]
    prefill = None
    if args.model:
        prefill = prefill_seconds(args.model, args.prompt_tokens, args.rounds)
        ratio = prefill["sdpa"] / prefill["blocked"]
        print(
            f"{args.model}, {args.prompt_tokens}-token prefill: SDPA {prefill['sdpa']:.2f} s, "
            f"blocked {prefill['blocked']:.2f} s ({ratio:.2f}x)"
        )
        headline.append(
            {
                "label": f"{args.model} prefill {args.prompt_tokens}",
                "metric": "SDPA / blocked",
                "value": ratio,
            }
        )
    write_results(
        args.json, "benchmarks.kernels.prefill_attention", headline, {"kernels": rows, "prefill": prefill}
    )


if __name__ == "__main__":
    main()
