"""Should mixed chunks be on by default? Running streams' TPOT while a 4,096-token prompt arrives,
``--enable-mixed-chunk`` on against off, one server each, in one script (issue 27, class 5).

A random Llama (byte-level tokenizer, so prompt characters are tokens; ``--hidden``/``--layers``
size it) serves ``--streams`` native streams of ``--stream-tokens`` tokens each (constrained to
``[a-z ]`` so every token is one text chunk); once all have started, one prompt of
``--prompt-tokens`` arrives. Reported per mode: the streams' inter-token gaps (p50, max, the max
after the arrival), their TPOT p50/p99, and the newcomer's TTFT.

    python -m benchmarks.workloads.mixed_chunk_default                 # ~2-4 min on 2 cores
    python -m benchmarks.workloads.mixed_chunk_default --streams 2 --prompt-tokens 512  # smoke
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from typing import Any

import httpx

from benchmarks.harness import percentile

STREAM_REGEX = "[a-z ]+"


async def stream_generate(client: httpx.AsyncClient, text: str, tokens: int, started: list[float]) -> dict:
    body = {
        "text": text,
        "stream": True,
        "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True, "regex": STREAM_REGEX},
    }
    start, times, last = time.perf_counter(), [], ""
    async with client.stream("POST", "/generate", json=body) as r:
        async for line in r.aiter_lines():
            if not line.startswith("data: {"):
                continue
            text_now = json.loads(line[6:]).get("text", "")
            if len(text_now) > len(last):
                times.append(time.perf_counter())
                if len(times) == 1:
                    started.append(times[0])
            last = text_now
    return {"start": start, "times": times}


async def arrival(url: str, streams: int, stream_tokens: int, prompt_tokens: int) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=streams + 2)
    async with httpx.AsyncClient(base_url=url, timeout=3600, limits=limits) as client:
        await stream_generate(client, "warm up", 4, [])
        started: list[float] = []
        tasks = [
            asyncio.create_task(stream_generate(client, f"story {i}: ", stream_tokens, started))
            for i in range(streams)
        ]
        while len(started) < streams:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)
        prompt = ("the quick brown fox jumps over the lazy dog " * (prompt_tokens // 44 + 1))[:prompt_tokens]
        newcomer = await stream_generate(client, prompt, 2, [])
        runs = await asyncio.gather(*tasks)
    t0 = newcomer["start"]
    gaps = [b - a for r in runs for a, b in zip(r["times"], r["times"][1:])]
    during = [b - a for r in runs for a, b in zip(r["times"], r["times"][1:]) if b > t0]
    tpots = [(r["times"][-1] - r["times"][0]) / (len(r["times"]) - 1) for r in runs if len(r["times"]) > 1]
    return {
        "newcomer_ttft_ms": 1000 * (newcomer["times"][0] - t0) if newcomer["times"] else None,
        "itl_p50_ms": 1000 * percentile(gaps, 50),
        "itl_max_ms": 1000 * max(gaps),
        "itl_after_arrival_max_ms": 1000 * max(during, default=0),
        "tpot_p50_ms": 1000 * percentile(tpots, 50),
        "tpot_p99_ms": 1000 * percentile(tpots, 99),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--stream-tokens", type=int, default=96)
    ap.add_argument("--prompt-tokens", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    from radixlm.runtime.server.launch import launch_server
    from tests.helpers.model_helpers import save_tiny_model, tiny_llama_config

    config = tiny_llama_config(
        hidden_size=args.hidden,
        intermediate_size=3 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.hidden // 64,
        num_key_value_heads=max(args.hidden // 128, 1),
        head_dim=64,
        max_position_embeddings=8192,
    )
    with tempfile.TemporaryDirectory() as d:
        save_tiny_model(config, d)
        results = {}
        for mixed in (True, False):
            with launch_server(
                model=d, device="cpu", num_threads=args.threads, context_length=8192, enable_mixed_chunk=mixed
            ) as server:
                results["mixed" if mixed else "prefill-first"] = asyncio.run(
                    arrival(server.url, args.streams, args.stream_tokens, args.prompt_tokens)
                )
    print(json.dumps({"args": vars(args), "results": results}, indent=1))


if __name__ == "__main__":
    main()
