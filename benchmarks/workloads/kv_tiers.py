"""KV tiers under the radix cache (issue 30): multi-turn agents larger than the pool, a restart, bandwidth.

1. Agents: ``--convs`` conversations of ``--turns`` turns, each prompt = a shared context (~1,500
   tokens) + the conversation's own document (~350 tokens) + its history so far + a new question;
   conversations take turns round-robin, one request at a time, ``--new-tokens`` greedy tokens each.
   The KV pool (``--pool-tokens``) holds about a quarter of the working set, so between two turns of
   one conversation its document and history are evicted. Variants: tiers off (plain radix cache),
   host tier on (fp32, exact; outputs must equal tiers-off), host tier at fp16 (token agreement
   with the exact run reported). TTFT = time to the first streamed token.
2. Restart: a ``--restart-tokens`` prompt served by a fresh engine with a disk tier, the engine shut
   down, a new one started on the same directory: TTFT of the same prefix (new question) cold vs
   after the restart.
3. Bandwidth: the host and disk tiers' load-back bytes/second (from their counters) against a plain
   memcpy of 256 MB on this machine.

    python -m benchmarks.workloads.kv_tiers --json benchmarks/results/kv_tiers.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import radixlm._env  # noqa: F401  (thread settings before torch)  # isort: skip
import torch

from benchmarks.harness import add_json_argument, write_results
from radixlm.runtime.engine import Engine
from radixlm.runtime.kv_tiers.disk_store import PAGE_TOKENS, DiskStore
from radixlm.runtime.weights.model_registry import resolve_model

_TOPICS = "rivers glaciers volcanoes deserts forests reefs comets tides storms canyons caves islands".split()


def shared_context() -> str:
    lines = [
        f"Rule {i}: when the user asks about {_TOPICS[i % len(_TOPICS)]}, cite source {i * 7 % 31} "
        f"and keep the answer under {20 + i % 9} words; never mention rule {(i * 5) % 60}."
        for i in range(42)
    ]
    return "You are a field-research assistant.\n" + "\n".join(lines) + "\n"


def document(conv: int) -> str:
    facts = [
        f"Observation {j} of site {conv}: the {_TOPICS[(conv + j) % len(_TOPICS)]} measured "
        f"{(conv * 37 + j * 11) % 997} units at hour {j % 24}."
        for j in range(14)
    ]
    return f"Document for agent {conv}:\n" + "\n".join(facts) + "\n"


def question(conv: int, turn: int) -> str:
    return f"Agent {conv}, step {turn}: summarise observation {turn * 3 % 14} and what to check next.\n"


def _ttft_generate(engine: Engine, prompt: str, new_tokens: int) -> tuple[float, str, list[int]]:
    params = {"temperature": 0, "max_new_tokens": new_tokens, "ignore_eos": True}
    start = time.perf_counter()
    first: float | None = None
    text, ids = "", []
    for chunk in engine.generate(prompt, params, stream=True):
        if first is None:
            first = time.perf_counter() - start
        text, ids = chunk["text"], chunk["output_ids"]
    assert first is not None
    return first, text, list(ids)


def run_agents(model: str, args: argparse.Namespace, **tiers: Any) -> dict[str, Any]:
    engine = Engine(model=model, max_total_tokens=args.pool_tokens, chunked_prefill_size=1024, **tiers)
    try:
        shared = shared_context()
        histories = {c: shared + document(c) for c in range(args.convs)}
        ttfts: list[float] = []
        outputs: list[list[int]] = []
        start = time.perf_counter()
        for turn in range(args.turns):
            for conv in range(args.convs):
                prompt = histories[conv] + question(conv, turn)
                ttft, text, ids = _ttft_generate(engine, prompt, args.new_tokens)
                ttfts.append(ttft)
                outputs.append(ids)
                histories[conv] = prompt + text + "\n"
        total = time.perf_counter() - start
        info = engine.get_server_info()
    finally:
        engine.shutdown()
    ttfts.sort()
    return {
        "ttft_p50_s": statistics.median(ttfts),
        "ttft_p99_s": ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))],
        "total_s": total,
        "requests": len(ttfts),
        "outputs": outputs,
        "stats": {k: v for k, v in info.items() if k.startswith(("host_", "cache_", "kv_"))},
    }


def run_restart(model: str, args: argparse.Namespace) -> dict[str, Any]:
    prefix = (shared_context() * 4)[: args.restart_tokens * 4]
    with tempfile.TemporaryDirectory() as storage:
        opts = {"max_total_tokens": args.restart_tokens * 2, "hicache_storage_dir": storage}
        engine = Engine(model=model, **opts)
        try:
            cold, _, _ = _ttft_generate(engine, prefix + "Question one?", 1)
            prompt_tokens = engine.get_server_info()["cache_requested_tokens"]
        finally:
            engine.shutdown()
        raw = {"raw_read_cold_bytes_per_s": file_read_bandwidth(storage, cold=True)}
        raw["raw_read_warm_bytes_per_s"] = file_read_bandwidth(storage, cold=False)
        engine = Engine(model=model, **opts)
        try:
            warm, _, _ = _ttft_generate(engine, prefix + "Question two?", 1)
            disk = {k: v for k, v in engine.get_server_info().items() if k.startswith("disk_")}
        finally:
            engine.shutdown()
    return {"prompt_tokens": prompt_tokens, "cold_ttft_s": cold, "restart_ttft_s": warm, "disk": disk, **raw}


def file_read_bandwidth(directory: str, cold: bool) -> float:
    """Bytes/second reading every page file of ``directory`` whole; ``cold`` first asks the kernel to
    drop them from the page cache (``POSIX_FADV_DONTNEED``, no root needed for clean pages)."""
    paths = sorted(Path(directory).glob("*.kv"))
    if cold:
        for path in paths:
            fd = os.open(path, os.O_RDONLY)
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
    start = time.perf_counter()
    nbytes = sum(len(path.read_bytes()) for path in paths)
    return nbytes / (time.perf_counter() - start)


def memcpy_bandwidth() -> float:
    src = torch.empty(64 * 1024 * 1024, dtype=torch.float32).fill_(1.0)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t0)
    return src.numel() * 4 / best


def prefetch_overlap(model: str, pages: int = 55) -> dict[str, float]:
    """Disk tier load of ``pages`` pages shaped like ``model``'s KV: read at admission (no prefetch),
    prefetched and loaded at once, and loaded after the prefetch finished (the overlapped case: the
    reads ran while the scheduler was busy with other batches). Median ms of 3."""
    engine = Engine(model=model, max_total_tokens=(pages + 1) * PAGE_TOKENS)
    pool = engine.scheduler.runner.kv_pool
    n = pages * PAGE_TOKENS
    ids, slots = list(range(n)), torch.arange(1, n + 1)
    times: dict[str, list[float]] = {"direct_ms": [], "prefetch_then_load_ms": [], "after_prefetch_ms": []}
    with tempfile.TemporaryDirectory() as storage:
        store = DiskStore(storage, 10**11, pool, pool.dtype, "bench")
        store.save(ids, slots)
        store.flush()
        for _ in range(3):
            for name in times:
                if name == "after_prefetch_ms":
                    task = store.prefetch(ids, 0)
                    assert task is not None
                    task.wait()
                start = time.perf_counter()
                if name == "prefetch_then_load_ms":
                    store.prefetch(ids, 0)
                assert store.load(ids, 0, n, slots) == n
                times[name].append((time.perf_counter() - start) * 1000)
        store.close()
    engine.shutdown()
    return {"pages": pages, **{k: statistics.median(v) for k, v in times.items()}}


def _bw(stats: dict[str, Any], tier: str) -> float:
    seconds = stats.get(f"{tier}_load_seconds", 0.0)
    return stats.get(f"{tier}_loaded_bytes", 0) / seconds if seconds else 0.0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--convs", type=int, default=16)
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--new-tokens", type=int, default=8)
    p.add_argument("--pool-tokens", type=int, default=2400)
    p.add_argument("--restart-tokens", type=int, default=4000)
    p.add_argument("--only-restart", action="store_true", help="the restart and bandwidths, no agents")
    add_json_argument(p)
    args = p.parse_args()
    model = resolve_model("smollm2-135m")
    if args.only_restart:
        restart = run_restart(model, args)
        restart["memcpy_bytes_per_s"] = memcpy_bandwidth()
        restart["disk_load_bytes_per_s"] = _bw(restart["disk"], "disk")
        restart["prefetch"] = prefetch_overlap(model)
        print(restart_report(restart))
        print("disk tier load of 55 pages (ms):", restart["prefetch"])
        headline = [
            {
                "label": "kv tiers",
                "metric": "restart_ttft_ratio",
                "value": restart["cold_ttft_s"] / restart["restart_ttft_s"],
            }
        ]
        write_results(
            args.json, "benchmarks.workloads.kv_tiers", headline, {"args": vars(args), "restart": restart}
        )
        return
    off = run_agents(model, args)
    on = run_agents(model, args, enable_hierarchical_cache=True)
    fp16 = run_agents(model, args, enable_hierarchical_cache=True, hicache_dtype="float16")
    restart = run_restart(model, args)
    same = sum(a == b for a, b in zip(on["outputs"], fp16["outputs"], strict=True))
    results = {
        "args": vars(args),
        "tiers_off": {k: v for k, v in off.items() if k != "outputs"},
        "tiers_on": {k: v for k, v in on.items() if k != "outputs"},
        "tiers_on_fp16": {k: v for k, v in fp16.items() if k != "outputs"},
        "exact_outputs_equal_tiers_off": on["outputs"] == off["outputs"],
        "fp16_requests_identical": f"{same}/{len(on['outputs'])}",
        "restart": restart,
        "memcpy_bytes_per_s": memcpy_bandwidth(),
        "host_load_bytes_per_s": _bw(on["stats"], "host"),
        "disk_load_bytes_per_s": _bw(restart["disk"], "disk"),
    }
    print(report(results, same, len(on["outputs"])))
    speed = {
        "ttft_p50_ratio": off["ttft_p50_s"] / on["ttft_p50_s"],
        "throughput_ratio": off["total_s"] / on["total_s"],
        "restart_ttft_ratio": restart["cold_ttft_s"] / restart["restart_ttft_s"],
    }
    headline = [{"label": "kv tiers", "metric": k, "value": v} for k, v in speed.items()]
    write_results(args.json, "benchmarks.workloads.kv_tiers", headline, {**results, **speed})


def report(results: dict[str, Any], same: int, total: int) -> str:
    off, on, restart = results["tiers_off"], results["tiers_on"], results["restart"]
    lines = ["| variant | TTFT p50 | TTFT p99 | total | cache hit rate | host hit tokens |"]
    lines.append("|---|---|---|---|---|---|")
    for name in ("tiers_off", "tiers_on", "tiers_on_fp16"):
        r = results[name]
        stats = r["stats"]
        lines.append(
            f"| {name} | {r['ttft_p50_s'] * 1000:.0f} ms | {r['ttft_p99_s'] * 1000:.0f} ms "
            f"| {r['total_s']:.1f} s | {stats['cache_hit_rate']:.2f} | {stats.get('host_hit_tokens', 0)} |"
        )
    ttft_x, total_x = off["ttft_p50_s"] / on["ttft_p50_s"], off["total_s"] / on["total_s"]
    lines.append(f"TTFT p50 x{ttft_x:.1f}, throughput x{total_x:.2f}")
    lines.append(f"exact outputs equal tiers off: {results['exact_outputs_equal_tiers_off']}")
    lines.append(f"fp16 host tier: {same}/{total} requests token-identical to the exact run")
    lines.append(restart_report({**restart, **results}))
    lines.append(f"host tier load-back GB/s: {results['host_load_bytes_per_s'] / 1e9:.2f}")
    return "\n".join(lines)


def restart_report(r: dict[str, Any]) -> str:
    cold, warm = r["cold_ttft_s"], r["restart_ttft_s"]
    gb = {k: r[f"{k}_bytes_per_s"] / 1e9 for k in ("disk_load", "memcpy", "raw_read_cold", "raw_read_warm")}
    return (
        f"restart, {r['prompt_tokens']} prompt tokens: cold {cold * 1000:.0f} ms, "
        f"disk tier {warm * 1000:.0f} ms (x{cold / warm:.1f})\n"
        f"GB/s: disk tier load-back {gb['disk_load']:.2f}, reading its files cold {gb['raw_read_cold']:.2f} "
        f"/ page cache {gb['raw_read_warm']:.2f}, memcpy {gb['memcpy']:.2f}"
    )


if __name__ == "__main__":
    main()
