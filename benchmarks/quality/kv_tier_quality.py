"""What a narrower host tier costs (issue 30): a prefix's KV sent down to the host tier at ``--hicache-dtype``
and loaded back, against the same prefix kept in the pool (fp32), on the default model.

For each of ``--prompts`` windows of real text (docs/architecture.md): the first ``--prefix`` tokens
are prefilled, their KV goes through a ``HostArena`` of the dtype (``write`` then ``read``: the tier's
own code), then (a) the next ``--suffix`` tokens of the text are prefilled over it, teacher-forced:
top-1 agreement and logit error against the exact run, and the suffix's perplexity; (b) ``--new-tokens``
greedy tokens are decoded from the prefix: tokens identical to the exact run's, first divergence.
Also the arena's load-back (``read``) bandwidth per dtype against a memcpy of the same fp32 bytes.

    python -m benchmarks.quality.kv_tier_quality [--dtypes float32,float16,bfloat16,int8] [--json PATH]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import radixlm._env  # noqa: F401  (thread settings before torch)  # isort: skip
import torch

from benchmarks.harness import REPO, add_json_argument, write_results
from radixlm.runtime.kv_tiers.host_arena import HostArena

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "int8": torch.int8}


def _round_trip(runner: Any, slots: torch.Tensor, dtype: torch.dtype) -> float:
    """Send ``slots``' KV to a host arena of ``dtype`` and back; returns the load-back seconds."""
    arena = HostArena(runner.kv_pool, slots.numel(), dtype)
    rows = arena.alloc(slots.numel())
    assert rows is not None
    arena.write(slots, rows)
    start = time.perf_counter()
    arena.read(rows, slots)
    seconds = time.perf_counter() - start
    arena.close()
    return seconds


def _run(runner: Any, ids: list[int], args: argparse.Namespace, dtype: torch.dtype | None) -> dict[str, Any]:
    from tests.helpers.model_helpers import PagedSession

    session = PagedSession(runner)
    row = session.open()
    prefix, suffix = ids[: args.prefix], ids[args.prefix : args.prefix + args.suffix]
    last = session.extend([row], [prefix])[0]
    slots = runner.req_to_token_pool.req_to_token[row, : args.prefix].clone()
    load_s = _round_trip(runner, slots, dtype) if dtype is not None else 0.0
    greedy_row = session.share_prefix(row, args.prefix)
    suffix_logits = session.extend([row], [suffix], all_logits=True)[0]
    tokens = [int(last.argmax())]
    for _ in range(args.new_tokens - 1):
        tokens.append(int(session.decode([greedy_row], [tokens[-1]])[0].argmax()))
    session.close(greedy_row)
    session.close(row)
    return {"logits": suffix_logits.float(), "greedy": tokens, "load_s": load_s}


def main() -> None:
    from tests.helpers.model_helpers import make_runner

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--prefix", type=int, default=512)
    ap.add_argument("--suffix", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--dtypes", default="float32,float16,bfloat16,int8")
    add_json_argument(ap)
    args = ap.parse_args()

    runner = make_runner("smollm2-135m", context_length=2048, num_threads=2, max_total_tokens=8192)
    text_ids = runner.loaded.tokenizer((REPO / "docs" / "architecture.md").read_text())["input_ids"]
    window = args.prefix + args.suffix
    stride = (len(text_ids) - window) // max(args.prompts - 1, 1)
    prompts = [text_ids[i * stride : i * stride + window] for i in range(args.prompts)]
    exact = [_run(runner, ids, args, None) for ids in prompts]
    fp32_bytes = args.prefix * HostArena.token_bytes(runner.kv_pool, torch.float32)
    memcpy_src, memcpy_dst = torch.ones(fp32_bytes // 4), torch.empty(fp32_bytes // 4)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        memcpy_dst.copy_(memcpy_src)
        times.append(time.perf_counter() - start)
    memcpy_s = sorted(times)[2]

    print(
        "| host dtype | bytes/token | suffix top-1 agree | max abs logit err | mean abs logit err "
        "| suffix ppl (exact) | greedy tokens identical | first divergence (min) | load-back GB/s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows: list[dict[str, Any]] = []
    for name in [d for d in args.dtypes.split(",") if d]:
        dtype = _DTYPES[name]
        runs = [_run(runner, ids, args, dtype) for ids in prompts]
        agree = max_err = mean_err = identical = 0.0
        nll = nll_exact = 0.0
        first_div = args.new_tokens
        for ids, got, ref in zip(prompts, runs, exact):
            targets = torch.tensor(ids[args.prefix + 1 : args.prefix + args.suffix])[:, None]
            diff = (got["logits"] - ref["logits"]).abs()
            agree += (got["logits"].argmax(-1) == ref["logits"].argmax(-1)).float().mean().item()
            max_err, mean_err = max(max_err, diff.max().item()), mean_err + diff.mean().item()
            nll += -torch.log_softmax(got["logits"][:-1], -1).gather(1, targets).mean().item()
            nll_exact += -torch.log_softmax(ref["logits"][:-1], -1).gather(1, targets).mean().item()
            same = [a == b for a, b in zip(got["greedy"], ref["greedy"])]
            identical += sum(same)
            first_div = min(first_div, same.index(False) if False in same else args.new_tokens)
        n = len(prompts)
        load_s = sorted(r["load_s"] for r in runs)[n // 2]
        row = {
            "dtype": name,
            "bytes_per_token": HostArena.token_bytes(runner.kv_pool, dtype),
            "suffix_top1_agreement": agree / n,
            "max_abs_logit_error": max_err,
            "mean_abs_logit_error": mean_err / n,
            "suffix_ppl": float(torch.tensor(nll / n).exp()),
            "suffix_ppl_exact": float(torch.tensor(nll_exact / n).exp()),
            "greedy_identical": identical / (n * args.new_tokens),
            "greedy_first_divergence_min": first_div,
            "load_back_gb_s": args.prefix * HostArena.token_bytes(runner.kv_pool, dtype) / load_s / 1e9,
        }
        rows.append(row)
        print(
            f"| {name} | {row['bytes_per_token']} | {row['suffix_top1_agreement']:.1%} "
            f"| {max_err:.4f} | {row['mean_abs_logit_error']:.5f} "
            f"| {row['suffix_ppl']:.3f} ({row['suffix_ppl_exact']:.3f}) | {row['greedy_identical']:.1%} "
            f"| {first_div} | {row['load_back_gb_s']:.2f} |",
            flush=True,
        )
    memcpy_gb_s = fp32_bytes / memcpy_s / 1e9
    print(f"memcpy of {fp32_bytes / 1e6:.1f} MB (the prefix's fp32 KV): {memcpy_gb_s:.2f} GB/s")
    headline = [
        {"label": f"host {r['dtype']}", "metric": "greedy_identical", "value": r["greedy_identical"]}
        for r in rows
    ]
    results = {"variants": rows, "memcpy_gb_s": memcpy_gb_s, "args": vars(args)}
    write_results(args.json, "benchmarks.quality.kv_tier_quality", headline, results)


if __name__ == "__main__":
    main()
