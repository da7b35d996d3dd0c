"""Priority scheduling (issue 32): one interactive stream at high priority beside a batch job.

A random Llama (byte-level tokenizer; ``--hidden``/``--layers`` size it) serves ``--batch`` native
requests at priority 0 under ``--max-running`` rows, so most of them wait; meanwhile one interactive
client sends ``--turns`` requests one after another at priority 10. Reported: the interactive TTFT
(p50, max) and TPOT (p50 over its turns; ``turns_beside_batch`` counts those that ended before the
batch did) alone, beside the batch with ``--enable-priority-scheduling`` and beside
it without (the field then is ignored), one server per setting, in one script. With ``--rounds``
``N`` the priority server alternates alone and beside-the-batch runs ``N`` times, so a load swing of
the machine hits both; each round's ratios are reported and their medians are the result.

    python -m benchmarks.workloads.priority                       # ~3-6 min on 2 cores
    python -m benchmarks.workloads.priority --batch 8 --turns 2   # smoke
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

REGEX = "[a-z ]+"  # every token one text chunk


async def generate(client: httpx.AsyncClient, text: str, tokens: int, priority: int) -> dict[str, float]:
    """One streamed request: its TTFT and TPOT in ms."""
    body = {
        "text": text,
        "stream": True,
        "priority": priority,
        "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True, "regex": REGEX},
    }
    start, times, last = time.perf_counter(), [], ""
    async with client.stream("POST", "/generate", json=body) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: {"):
                now_text = json.loads(line[6:]).get("text", "")
                if len(now_text) > len(last):
                    times.append(time.perf_counter())
                last = now_text
    tpot = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else 0.0
    return {"ttft_ms": 1000 * (times[0] - start), "tpot_ms": 1000 * tpot, "end": times[-1]}


async def scenario(url: str, args: argparse.Namespace, with_batch: bool) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=args.batch + 4)
    async with httpx.AsyncClient(base_url=url, timeout=3600, limits=limits) as client:
        await generate(client, "warm up", 4, 0)
        batch = []
        if with_batch:
            batch = [
                asyncio.create_task(
                    generate(client, f"batch job {i}: " + "x" * args.prompt, args.batch_tokens, 0)
                )
                for i in range(args.batch)
            ]
            await asyncio.sleep(args.settle)  # the rows are full and the queue is long
        turns = []
        for t in range(args.turns):
            turns.append(
                await generate(client, f"interactive turn {t}: " + "y" * args.prompt, args.tokens, 10)
            )
        batch_done = await asyncio.gather(*batch)
    result = {
        "ttft_p50_ms": percentile([t["ttft_ms"] for t in turns], 50),
        "ttft_max_ms": max(t["ttft_ms"] for t in turns),
        "tpot_p50_ms": percentile([t["tpot_ms"] for t in turns], 50),
    }
    if batch_done:
        # a turn that ended after the batch ran partly alone: the comparison needs all of them beside it
        batch_end = max(b["end"] for b in batch_done)
        result["turns_beside_batch"] = sum(t["end"] <= batch_end for t in turns)
        result["batch_ttft_p50_ms"] = percentile([b["ttft_ms"] for b in batch_done], 50)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=32, help="tokens per interactive turn")
    ap.add_argument("--batch-tokens", type=int, default=256, help="tokens per batch request")
    ap.add_argument("--prompt", type=int, default=64, help="prompt characters (= tokens) per request")
    ap.add_argument("--max-running", type=int, default=4)
    ap.add_argument("--settle", type=float, default=0.3, help="seconds between the batch and the first turn")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1, help="alone / beside pairs on the priority server")
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
        max_position_embeddings=1024,
    )
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as d:
        save_tiny_model(config, d)
        for enabled in (True, False):
            server_args = dict(
                model=d,
                device="cpu",
                num_threads=args.threads,
                context_length=1024,
                max_running_requests=args.max_running,
                enable_priority_scheduling=enabled,
            )
            with launch_server(**server_args) as server:
                if not enabled:
                    results["batch, priority off"] = asyncio.run(scenario(server.url, args, with_batch=True))
                    continue
                for k in range(args.rounds):
                    alone = asyncio.run(scenario(server.url, args, with_batch=False))
                    beside = asyncio.run(scenario(server.url, args, with_batch=True))
                    results[f"round {k}"] = {
                        "alone": alone,
                        "batch, priority on": beside,
                        **_ratios(beside, alone),
                    }
                    results.setdefault("alone", alone)
                    results.setdefault("batch, priority on", beside)
    results["batch, priority off"].update(_ratios(results["batch, priority off"], results["alone"]))
    rounds = [results[f"round {k}"] for k in range(args.rounds)]
    results["median over rounds, priority on"] = {
        key: percentile([r[key] for r in rounds], 50)
        for key in ("ttft_vs_alone", "ttft_max_vs_alone", "tpot_vs_alone")
    }
    print(json.dumps({"args": vars(args), "results": results}, indent=1))


def _ratios(beside: dict[str, Any], alone: dict[str, Any]) -> dict[str, float]:
    return {
        "ttft_vs_alone": beside["ttft_p50_ms"] / max(alone["ttft_p50_ms"], 1e-9),
        "ttft_max_vs_alone": beside["ttft_max_ms"] / max(alone["ttft_max_ms"], 1e-9),
        "tpot_vs_alone": beside["tpot_p50_ms"] / max(alone["tpot_p50_ms"], 1e-9),
    }


if __name__ == "__main__":
    main()
