"""radixlm against llama.cpp on the same GGUF and the same threads, over HTTP with one client code.

Sections (``--sections``, default all):

- ``single``: one streaming chat, a ~300-token prompt, up to 128 greedy tokens: TTFT and decode
  tok/s (median of ``--repeats``, each on another question after the same notes), radixlm,
  ``python -m llama_cpp.server`` and llama.cpp's native ``llama-server --parallel 8``;
- ``concurrent``: 8 and 32 streaming chat clients (``benchmarks.workloads.serving``'s client): aggregate
  tok/s, TTFT and TPOT p50/p99, all three servers;
- ``long``: radixlm alone, 16 running streams, then one ~2,000-token prompt arrives: the streams'
  inter-token gaps and TPOT, p50/p99, with ``--enable-mixed-chunk`` and prefill-first.

llama-cpp-python is installed on first use into a venv under RADIXLM_CACHE, and ``llama-server``
built there from the same version's vendored llama.cpp (``llama_cpp_peer.py``); ``--peers`` picks
which servers run.

    python -m benchmarks.peers.cpu_speed                    # everything (~15-25 min on 2 quiet cores)
    python -m benchmarks.peers.cpu_speed --sections long --long-streams 4 --long-prompt-tokens 400  # smoke
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

import httpx

from benchmarks.harness import add_json_argument, parse_server_args, percentile, write_results
from benchmarks.peers.llama_cpp_peer import cache_dir, launch_llama_cpp_server, launch_native_server
from benchmarks.workloads.serving import run_level

FACT = "Note {i}: the lighthouse keeper logged {n} ships passing the northern reef that week."
QUESTION = "Using the notes above, write a long, detailed story about {subject}."
# NOTE: each repeat of the single stream asks about another subject: a repeated question's greedy
# answer would be served from the first one, which speculation drafts from the radix tree (measured:
# 540-624 "decode tok/s" as the median of three identical questions, 144 without speculation).
SUBJECTS = ("the lighthouse keeper", "the ships' captains", "the northern reef", "the keeper's logbook")


def long_prompt(approx_tokens: int, variant: int = 0) -> str:
    """Distinct numbered sentences (~22 tokens each), then a question that invites a long answer
    (about one of ``SUBJECTS``, picked by ``variant``)."""
    count = max(1, approx_tokens // 22)
    notes = "\n".join(FACT.format(i=i, n=(i * 37) % 101) for i in range(count))
    return notes + "\n\n" + QUESTION.format(subject=SUBJECTS[variant % len(SUBJECTS)])


def default_gguf() -> str:
    found = sorted((cache_dir() / "gguf").rglob("*Q4_1.gguf"))
    if not found:
        raise SystemExit("no *Q4_1.gguf under RADIXLM_CACHE/gguf; pass --gguf")
    return str(found[0])


async def stream_chat(
    client: httpx.AsyncClient,
    prompt: str,
    max_tokens: int,
    extra: dict[str, Any] | None = None,
    started: list[float] | None = None,
) -> dict[str, Any]:
    """One streaming chat; returns the send time, each content chunk's arrival time and the usage.
    The first chunk's time is also appended to ``started`` when given."""
    body = {
        "model": "default",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        **(extra or {}),
    }
    start = time.perf_counter()
    times: list[float] = []
    usage: dict[str, Any] = {}
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread())[:300]!r}")
        async for line in r.aiter_lines():
            if not line.startswith("data:") or line.strip() == "data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            usage = chunk.get("usage") or usage
            if any((c.get("delta") or {}).get("content") for c in chunk.get("choices") or []):
                times.append(time.perf_counter())
                if started is not None and len(times) == 1:
                    started.append(times[0])
    return {"start": start, "times": times, "usage": usage}


async def single_stream(url: str, prompt_tokens: int, max_tokens: int, repeats: int) -> dict[str, Any]:
    """``repeats`` streaming chats one after another, each on another question after the same notes."""
    async with httpx.AsyncClient(base_url=url, timeout=3600) as client:
        await stream_chat(client, "Say hello.", 8)  # warm-up
        runs = [await stream_chat(client, long_prompt(prompt_tokens, r), max_tokens) for r in range(repeats)]
    ttfts = [r["times"][0] - r["start"] for r in runs]
    tokens = [r["usage"].get("completion_tokens") or len(r["times"]) for r in runs]
    rates = [(n - 1) / (r["times"][-1] - r["times"][0]) for r, n in zip(runs, tokens) if n > 1]
    return {
        "prompt_tokens": runs[0]["usage"].get("prompt_tokens"),
        "output_tokens": tokens,
        "ttft_ms": 1000 * statistics.median(ttfts),
        "decode_tok_s": statistics.median(rates),
    }


async def long_arrival(url: str, streams: int, stream_tokens: int, prompt_tokens: int) -> dict[str, Any]:
    """``streams`` clients decode; once all have started (and a second later), one long prompt arrives."""
    limits = httpx.Limits(max_connections=streams + 2)
    async with httpx.AsyncClient(base_url=url, timeout=3600, limits=limits) as client:
        await stream_chat(client, "Say hello.", 4)
        ignore_eos = {"ignore_eos": True}
        started: list[float] = []
        tasks = [
            asyncio.create_task(
                stream_chat(
                    client, f"Tell story number {i} about the sea.", stream_tokens, ignore_eos, started
                )
            )
            for i in range(streams)
        ]
        while len(started) < streams:
            await asyncio.sleep(0.01)
        await asyncio.sleep(1.0)
        long_task = asyncio.create_task(stream_chat(client, long_prompt(prompt_tokens), 4))
        await asyncio.sleep(0)
        runs = await asyncio.gather(*tasks)
        long_run = await long_task
    arrival = long_run["start"]
    gaps = [b - a for r in runs for a, b in zip(r["times"], r["times"][1:])]
    during = [b - a for r in runs for a, b in zip(r["times"], r["times"][1:]) if b > arrival]
    tpots = [(r["times"][-1] - r["times"][0]) / (len(r["times"]) - 1) for r in runs if len(r["times"]) > 1]
    return {
        "long_prompt_tokens": long_run["usage"].get("prompt_tokens"),
        "long_ttft_ms": 1000 * (long_run["times"][0] - arrival) if long_run["times"] else None,
        "itl_p50_ms": 1000 * percentile(gaps, 50),
        "itl_p99_ms": 1000 * percentile(gaps, 99),
        "itl_max_ms": 1000 * max(gaps),
        "itl_after_arrival_max_ms": 1000 * max(during, default=0),
        "tpot_p50_ms": 1000 * percentile(tpots, 50),
        "tpot_p99_ms": 1000 * percentile(tpots, 99),
    }


def radixlm_server(gguf: str, threads: int, extra: dict[str, Any]):
    from radixlm.runtime.server.launch import launch_server

    return launch_server(model=gguf, num_threads=threads, **extra)


def run_peer(name: str, start, args: argparse.Namespace, sections: set[str]) -> dict[str, Any]:
    server = start()
    try:
        row: dict[str, Any] = {"server": name}
        if "single" in sections:
            row["single"] = asyncio.run(single_stream(server.url, 300, args.max_tokens, args.repeats))
            print(name, "single", json.dumps(row["single"]), flush=True)
        if "concurrent" in sections:
            row["concurrent"] = []
            for clients in (int(c) for c in args.levels.split(",")):
                level = asyncio.run(
                    run_level(server.url, "default", None, clients, clients * args.requests_per_client, 0)
                )
                row["concurrent"].append(level)
                print(name, "concurrent", json.dumps(level), flush=True)
        return row
    finally:
        server.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", default=None, help="default: the Q4_1 file under RADIXLM_CACHE/gguf")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sections", default="single,concurrent,long")
    ap.add_argument(
        "--peers",
        default="radixlm,llama-cpp-python,llama-server",
        help="comma-separated servers for single/concurrent",
    )
    ap.add_argument("--parallel", type=int, default=8, help="llama-server's --parallel slots")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--levels", default="8,32")
    ap.add_argument("--requests-per-client", type=int, default=2)
    ap.add_argument("--long-streams", type=int, default=16)
    ap.add_argument("--long-stream-tokens", type=int, default=128)
    ap.add_argument("--long-prompt-tokens", type=int, default=2000)
    ap.add_argument(
        "--server-arg", action="append", default=[], help="NAME=VALUE ServerArgs for radixlm (repeatable)"
    )
    add_json_argument(ap)
    args = ap.parse_args()
    gguf = args.gguf or default_gguf()
    sections = set(args.sections.split(","))
    extra = parse_server_args(args.server_arg)
    results: dict[str, Any] = {"gguf": gguf, "threads": args.threads, "peers": []}
    starters = {
        "radixlm": lambda: radixlm_server(gguf, args.threads, extra),
        "llama-cpp-python": lambda: launch_llama_cpp_server(gguf, args.threads),
        "llama-server": lambda: launch_native_server(gguf, args.threads, args.parallel),
    }
    if sections & {"single", "concurrent"}:
        for name in args.peers.split(","):
            if name not in starters:
                raise SystemExit(f"unknown peer {name!r} (choose from {', '.join(starters)})")
            label = f"{name} --parallel {args.parallel}" if name == "llama-server" else name
            results["peers"].append(run_peer(label, starters[name], args, sections))
    if "long" in sections:
        results["long"] = {}
        for mixed in (True, False):
            server = radixlm_server(gguf, args.threads, {**extra, "enable_mixed_chunk": mixed})
            try:
                row = asyncio.run(
                    long_arrival(
                        server.url, args.long_streams, args.long_stream_tokens, args.long_prompt_tokens
                    )
                )
            finally:
                server.shutdown()
            label = "mixed" if mixed else "prefill_first"
            results["long"][label] = row
            print("long", label, json.dumps(row), flush=True)
    write_results(args.json, __spec__.name, headline(results), results)


def headline(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each server's single-stream decode tok/s and aggregate tok/s per client count."""
    figures = []
    for row in results["peers"]:
        if "single" in row:
            figures.append(
                {
                    "label": f"{row['server']}, 1 stream",
                    "metric": "decode tok/s",
                    "value": row["single"]["decode_tok_s"],
                }
            )
        for level in row.get("concurrent", []):
            figures.append(
                {
                    "label": f"{row['server']}, {level['concurrency']} clients",
                    "metric": "output tok/s",
                    "value": level["output_tok_per_s"],
                }
            )
    return figures


if __name__ == "__main__":
    main()
