"""64 concurrent streaming requests give the same greedy output as one by one, and leak no KV."""

from __future__ import annotations

import asyncio
import json
import random

import httpx
import pytest

from radixlm.runtime.server.launch import launch_server
from tests.helpers.waiting import wait_until

NUM_REQUESTS = 64


@pytest.fixture(scope="module")
def server(tiny_llama_dir):
    with launch_server(
        model=tiny_llama_dir,
        device="cpu",
        num_threads=1,
        kv_cache_gb=0.02,
        context_length=512,
        max_running_requests=32,
    ) as handle:
        yield handle


def workload() -> list[dict]:
    rng = random.Random(0)
    shared = "You are a helpful assistant. "  # a common prefix exercises the radix cache
    bodies = []
    for i in range(NUM_REQUESTS):
        prompt = (shared if i % 2 else "") + "".join(
            rng.choice("abcdefgh ") for _ in range(rng.randint(1, 120))
        )
        params = {"temperature": 0, "max_new_tokens": rng.randint(1, 64), "ignore_eos": i % 3 == 0}
        bodies.append({"text": prompt, "sampling_params": params})
    return bodies


async def stream_one(client: httpx.AsyncClient, body: dict) -> tuple[str, list[int]]:
    last = None
    async with client.stream("POST", "/generate", json={**body, "stream": True}) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if line.startswith("data:") and line != "data: [DONE]":
                chunk = json.loads(line[5:])
                if last is not None:
                    assert chunk["text"].startswith(last["text"])
                last = chunk
    assert last is not None and last["meta_info"]["finish_reason"] is not None
    return last["text"], last["output_ids"]


async def run_concurrently(url: str, bodies: list[dict]) -> list[tuple[str, list[int]]]:
    limits = httpx.Limits(max_connections=NUM_REQUESTS)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:
        return await asyncio.gather(*(stream_one(client, b) for b in bodies))


def test_concurrent_streams_match_sequential(server):
    bodies = workload()
    with httpx.Client(base_url=server.url, timeout=120) as client:
        sequential = []
        for body in bodies:
            out = client.post("/generate", json=body).json()
            sequential.append((out["text"], out["output_ids"]))
        concurrent = asyncio.run(run_concurrently(server.url, bodies))
        mismatches = [i for i, (a, b) in enumerate(zip(sequential, concurrent)) if a != b]
        assert not mismatches, f"requests {mismatches} differ between concurrent and sequential runs"

        def idle_stats() -> dict | None:
            stats = client.get("/get_server_info").json()["stats"]
            return stats if stats["num_running"] == 0 and stats["num_queued"] == 0 else None

        stats = wait_until(idle_stats, 10, "the server to go idle")
        assert stats["kv_used"] == 0
        assert stats["kv_free"] + stats["kv_cached"] == stats["kv_total"]
        assert stats["cache_hit_rate"] > 0
