"""Serving benchmark: N concurrent clients send streaming chat requests to an OpenAI-compatible server.

Reports, per concurrency level, request throughput, output tokens/s, and time to first token (TTFT)
and time per output token (TPOT) at p50/p99. The same client measures any server:

    python -m benchmarks.workloads.serving                     # launches radixlm (smollm2-135m)
    python -m benchmarks.workloads.serving --base-url http://127.0.0.1:8080 --model whatever  # a peer
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from dataclasses import dataclass

import httpx

from benchmarks.harness import add_json_argument, parse_server_args, percentile, write_results

TOPICS = ["the sea", "a city at night", "autumn", "a robot", "bread", "mountains", "a library", "rain"]


@dataclass
class RequestResult:
    ttft: float
    latency: float
    output_tokens: int

    @property
    def tpot(self) -> float | None:
        return (self.latency - self.ttft) / (self.output_tokens - 1) if self.output_tokens > 1 else None


def make_prompts(n: int, seed: int) -> list[tuple[str, int]]:
    """(user message, max_tokens) pairs of mixed lengths."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = rng.randint(1, 3)
        topic = ", ".join(rng.sample(TOPICS, words))
        out.append((f"Write a short paragraph about {topic}.", rng.choice([32, 64, 96, 128])))
    return out


async def one_request(client: httpx.AsyncClient, model: str, prompt: str, max_tokens: int) -> RequestResult:
    """One streamed chat completion. A pooled keep-alive connection the server has just closed fails
    with "disconnected without sending a response" (seen with llama-server): that request was never
    served, so it is sent once more on a fresh connection."""
    try:
        return await _streamed_request(client, model, prompt, max_tokens)
    except httpx.RemoteProtocolError as exc:
        if "without sending a response" not in str(exc):
            raise
        return await _streamed_request(client, model, prompt, max_tokens)


async def _streamed_request(
    client: httpx.AsyncClient, model: str, prompt: str, max_tokens: int
) -> RequestResult:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start = time.perf_counter()
    ttft: float | None = None
    chunks = 0
    usage_tokens: int | None = None
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread())[:500]!r}")
        async for line in r.aiter_lines():
            if not line.startswith("data:") or line.strip() == "data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            if chunk.get("usage"):
                usage_tokens = chunk["usage"]["completion_tokens"]
            for choice in chunk.get("choices") or []:
                if (choice.get("delta") or {}).get("content"):
                    chunks += 1
                    if ttft is None:
                        ttft = time.perf_counter() - start
    latency = time.perf_counter() - start
    return RequestResult(ttft if ttft is not None else latency, latency, usage_tokens or chunks)


async def run_level(
    base_url: str, model: str, api_key: str | None, concurrency: int, num_requests: int, seed: int
) -> dict:
    prompts = make_prompts(num_requests, seed)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    queue: asyncio.Queue = asyncio.Queue()
    for p in prompts:
        queue.put_nowait(p)
    results: list[RequestResult] = []

    async def worker(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            prompt, max_tokens = queue.get_nowait()
            results.append(await one_request(client, model, prompt, max_tokens))

    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=3600, limits=limits) as client:
        start = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
        wall = time.perf_counter() - start
    ttfts = [r.ttft for r in results]
    tpots = [r.tpot for r in results if r.tpot is not None]
    return {
        "concurrency": concurrency,
        "requests": len(results),
        "wall_s": wall,
        "req_per_s": len(results) / wall,
        "output_tok_per_s": sum(r.output_tokens for r in results) / wall,
        "ttft_p50_ms": 1000 * percentile(ttfts, 50),
        "ttft_p99_ms": 1000 * percentile(ttfts, 99),
        "tpot_p50_ms": 1000 * percentile(tpots, 50),
        "tpot_p99_ms": 1000 * percentile(tpots, 99),
        "ttft_ms": [round(1000 * t, 2) for t in ttfts],  # each request's, for the latency plot
        "tpot_ms": [round(1000 * t, 3) for t in tpots],
    }


def markdown(rows: list[dict], label: str) -> str:
    lines = [
        f"### {label}",
        "",
        "| clients | requests | req/s | output tok/s | "
        "TTFT p50 (ms) | TTFT p99 (ms) | TPOT p50 (ms) | TPOT p99 (ms) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['concurrency']} | {r['requests']} | {r['req_per_s']:.2f} | "
            f"{r['output_tok_per_s']:.1f} | {r['ttft_p50_ms']:.0f} | {r['ttft_p99_ms']:.0f} | "
            f"{r['tpot_p50_ms']:.1f} | {r['tpot_p99_ms']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base-url", help="an OpenAI-compatible server; omitted: launch radixlm")
    parser.add_argument(
        "--model", default="smollm2-135m", help="model to launch, and the name sent in requests"
    )
    parser.add_argument("--api-key")
    parser.add_argument("--concurrency", default="1,8,32,64", help="comma-separated client counts")
    parser.add_argument(
        "--requests-per-client", type=int, default=2, help="requests per level = clients x this (min 8)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--label", default=None, help="table title (default: the server URL)")
    add_json_argument(parser)
    parser.add_argument("--markdown", help="append the table to this file (e.g. a benchmarks/log/ page)")
    parser.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help="NAME=VALUE ServerArgs for the launched radixlm server (repeatable)",
    )
    args = parser.parse_args()

    handle = None
    base_url = args.base_url
    if base_url is None:
        from radixlm.runtime.server.launch import launch_server

        handle = launch_server(model=args.model, **parse_server_args(args.server_arg))
        base_url = handle.url
    try:
        rows = []
        for level, c in enumerate(int(x) for x in args.concurrency.split(",")):
            # NOTE: each level its own prompts: a level repeating the last one's questions would have
            # their greedy answers drafted whole from the radix tree by speculation (TPOT 2.3 ms at 2
            # clients against 8.3 at 1, benchmarks/log/speculative.md)
            seed = args.seed + 1000 * level
            row = asyncio.run(
                run_level(base_url, args.model, args.api_key, c, max(8, c * args.requests_per_client), seed)
            )
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if not isinstance(v, list)}), flush=True)
    finally:
        if handle is not None:
            handle.shutdown()
    table = markdown(
        rows, args.label or f"{args.model} at {base_url if args.base_url else 'radixlm (launched)'}"
    )
    print(table)
    headline = [
        {"label": f"{r['concurrency']} clients", "metric": "output tok/s", "value": r["output_tok_per_s"]}
        for r in rows
    ]
    write_results(args.json, __spec__.name, headline, rows)
    if args.markdown:
        with open(args.markdown, "a") as f:
            f.write("\n" + table)


if __name__ == "__main__":
    main()
