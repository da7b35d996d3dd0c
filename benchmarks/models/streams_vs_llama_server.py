"""N concurrent streams on one GGUF file: ``radixlm serve`` against llama.cpp's ``llama-server
--parallel N``, same file, same threads, same context per slot, over HTTP with one client.

Each round starts one server, sends ``--streams`` streaming ``/v1/completions`` requests at once (the
same token-id prompts for both sides, a different prompt per stream, greedy, ``max_tokens`` fixed and
EOS ignored), then stops it; the sides alternate for ``--rounds`` rounds so that a change in the
machine's load hits both. Per round: TTFT (median and max over the streams), aggregate decode tok/s
(the sum over streams of each stream's ``(tokens - 1) / (last chunk - first chunk)``) and end-to-end
output tok/s (all tokens / (last chunk - send)). The ratio is radixlm / llama-server of the medians.

    python -m benchmarks.models.streams_vs_llama_server /tmp/llama-1.5b-q4_0.gguf [--streams 8] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

import httpx

from benchmarks.harness import add_json_argument, parse_server_args, write_results
from benchmarks.models.vs_llama_cpp import prompt_ids
from benchmarks.peers.llama_cpp_peer import launch_native_server


async def one_stream(client: httpx.AsyncClient, ids: list[int], max_tokens: int) -> dict[str, Any]:
    """One streaming completion of ``ids``: send time, each chunk's arrival, completion tokens."""
    body = {
        "model": "default",
        "prompt": ids,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start, times, usage = time.perf_counter(), [], {}
    async with client.stream("POST", "/v1/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread())[:300]!r}")
        async for line in r.aiter_lines():
            if not line.startswith("data:") or line.strip() == "data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            usage = chunk.get("usage") or usage
            if chunk.get("choices"):
                times.append(time.perf_counter())
    return {"start": start, "times": times, "tokens": int(usage.get("completion_tokens") or max_tokens)}


async def streams_round(url: str, prompts: list[list[int]], max_tokens: int) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=len(prompts) + 2)
    async with httpx.AsyncClient(base_url=url, timeout=3600, limits=limits) as client:
        await one_stream(client, prompts[0][:8], 4)  # warm-up
        runs = await asyncio.gather(*(one_stream(client, p, max_tokens) for p in prompts))
    ttfts = [r["times"][0] - r["start"] for r in runs]
    decode = sum((r["tokens"] - 1) / (r["times"][-1] - r["times"][0]) for r in runs)
    wall = max(r["times"][-1] for r in runs) - min(r["start"] for r in runs)
    return {
        "tokens": [r["tokens"] for r in runs],
        "ttft_p50_ms": 1000 * statistics.median(ttfts),
        "ttft_max_ms": 1000 * max(ttfts),
        "decode_tok_s": decode,
        "output_tok_s": sum(r["tokens"] for r in runs) / wall,
    }


def start_radixlm(gguf: str, threads: int, streams: int, ctx: int, extra: dict[str, Any]):
    from radixlm.runtime.server.launch import launch_server

    kv_gb = max(0.25, 2 * streams * ctx * kv_bytes_per_token(gguf) / 2**30)
    return launch_server(
        model=gguf,
        num_threads=threads,
        context_length=ctx,
        kv_cache_gb=kv_gb,
        max_running_requests=streams,
        **extra,
    )


def kv_bytes_per_token(gguf: str) -> int:
    """bf16/fp16 K and V of every layer for one token, from the file's metadata."""
    from gguf import GGUFReader

    fields = GGUFReader(gguf).fields

    def value(suffix: str) -> int:
        field = next(f for name, f in fields.items() if name.endswith(suffix))
        return int(field.parts[field.data[0]][0])

    layers, heads = value(".block_count"), value(".attention.head_count")
    kv_heads, hidden = value(".attention.head_count_kv"), value(".embedding_length")
    return 2 * layers * kv_heads * (hidden // heads) * 2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gguf")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=64, help="max_tokens per stream (EOS ignored)")
    ap.add_argument("--ctx", type=int, default=2048, help="context per stream / slot")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--sides", default="radixlm,llama-server")
    ap.add_argument("--server-arg", action="append", default=[], help="NAME=VALUE ServerArgs for radixlm")
    add_json_argument(ap)
    args = ap.parse_args()
    base = prompt_ids(args.gguf, args.prompt_tokens * args.streams)
    prompts = [base[i :: args.streams][: args.prompt_tokens] for i in range(args.streams)]
    extra = parse_server_args(args.server_arg)
    starters = {
        "radixlm": lambda: start_radixlm(args.gguf, args.threads, args.streams, args.ctx, extra),
        "llama-server": lambda: launch_native_server(args.gguf, args.threads, args.streams, args.ctx),
    }
    sides = args.sides.split(",")
    rounds: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    for i in range(args.rounds):
        for side in sides:
            t0 = time.perf_counter()
            server = starters[side]()
            start_s = time.perf_counter() - t0
            try:
                row = asyncio.run(streams_round(server.url, prompts, args.tokens))
            finally:
                server.shutdown()
            row["server_start_s"] = start_s
            rounds[side].append(row)
            shown = {k: v for k, v in row.items() if k != "tokens"}
            print(f"round {i} {side}", json.dumps(shown), flush=True)
    figures: dict[str, Any] = {"gguf": args.gguf, "threads": args.threads, "streams": args.streams}
    for side, rows in rounds.items():
        for key in ("decode_tok_s", "output_tok_s", "ttft_p50_ms", "ttft_max_ms", "server_start_s"):
            figures[f"{side}_{key}"] = round(statistics.median(r[key] for r in rows), 2)
    if len(sides) == 2:
        a, b = sides
        figures["decode_ratio"] = round(figures[f"{a}_decode_tok_s"] / figures[f"{b}_decode_tok_s"], 2)
        figures["output_ratio"] = round(figures[f"{a}_output_tok_s"] / figures[f"{b}_output_tok_s"], 2)
    figures["rounds"] = rounds
    print(json.dumps({k: v for k, v in figures.items() if k != "rounds"}, indent=2))
    headline = [
        {"label": f"{side}, {args.streams} streams", "metric": "aggregate decode tok/s", "value": v}
        for side in sides
        if (v := figures[f"{side}_decode_tok_s"])
    ]
    write_results(args.json, "benchmarks.models.streams_vs_llama_server", headline, figures)


if __name__ == "__main__":
    main()
