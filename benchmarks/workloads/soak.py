"""Soak test: many streaming clients with disconnects, aborts and invalid requests against one server.

    python -m benchmarks.workloads.soak --clients 96 --minutes 10 --repeats 2 [--json PATH]
    python -m benchmarks.workloads.soak --clients 64 --minutes 10 --hostile --compare

Starts ``radixlm serve`` with a small KV pool (retraction under pressure), then runs ``--clients``
concurrent loops until time is up. Each iteration is one of: a valid streaming request (must end
with ``[DONE]`` and no error event), a stream the client drops midway, a stream aborted with
``/abort_request``, or an invalid request (must get a 4xx). Reports failed valid requests (goal:
zero), p50/p99 latency of the valid ones, the RSS of every server process sampled over time, and
whether every KV slot is back in the pool at the end. ``--repeats`` runs it again on a fresh server.

``--hostile`` adds one client sending a random hostile request every second (``hostile_client.py``:
the 11 classes of issue 27); its answers are counted by status, and a 5xx or a dead ``/health`` is
reported as broken. ``--compare`` runs a plain and a hostile run back to back (each on a fresh
server) and reports the normal clients' failures, their TPOT p99 hostile/plain (goal <= 1.5), RSS
at the start and end of every server process, and whether the KV pool is whole after each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time
import uuid

import httpx

from benchmarks.harness import add_json_argument, write_results
from benchmarks.workloads.hostile_client import HostileClient
from radixlm.runtime.server.launch import launch_server

INVALID = [
    {"text": "x", "sampling_params": {"temperature": float("nan")}},
    {"text": "x", "sampling_params": {"n": 10**6}},
    {"input_ids": [-1]},
    {"text": "x", "sampling_params": {"regex": "a{99999}"}},
    {"nope": 1},
]


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            line = next(x for x in f if x.startswith("VmRSS:"))
        return int(line.split()[1]) / 1024
    except (OSError, StopIteration):
        return 0.0


def server_pids(root: int) -> list[int]:
    pids = [root]
    for stat in os.listdir("/proc"):
        if stat.isdigit():
            try:
                with open(f"/proc/{stat}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == root:
                        pids.append(int(stat))
            except (OSError, ValueError, IndexError):
                pass
    return pids


class Soak:
    def __init__(self, url: str, deadline: float, max_tokens: int) -> None:
        self.url, self.deadline, self.max_tokens = url, deadline, max_tokens
        self.latencies: list[float] = []
        self.tpots: list[float] = []  # seconds per output token after the first, per valid stream
        self.failures: list[str] = []
        self.counts = {"valid": 0, "disconnect": 0, "abort": 0, "invalid": 0}

    async def client(self, seed: int) -> None:
        rng = random.Random(seed)
        async with httpx.AsyncClient(base_url=self.url, timeout=300) as http:
            while time.monotonic() < self.deadline:
                kind = rng.choices(list(self.counts), weights=[6, 2, 1, 1])[0]
                self.counts[kind] += 1
                try:
                    await getattr(self, kind)(http, rng)
                except Exception as e:  # noqa: BLE001 - recorded, the soak goes on
                    if kind == "valid":
                        self.failures.append(f"{type(e).__name__}: {e}")

    def body(self, rng: random.Random, rid: str) -> dict:
        prompt = f"Soak {rng.randrange(50)}: " + "word " * rng.randrange(1, 120)
        params = {"max_new_tokens": rng.randrange(1, self.max_tokens), "temperature": rng.choice([0, 0.7])}
        return {"text": prompt, "stream": True, "rid": rid, "sampling_params": params}

    async def valid(self, http: httpx.AsyncClient, rng: random.Random) -> None:
        start = time.monotonic()
        events, first_at, last_at = [], 0.0, 0.0
        async with http.stream("POST", "/generate", json=self.body(rng, uuid.uuid4().hex)) as r:
            if r.status_code != 200:
                self.failures.append(f"status {r.status_code}: {(await r.aread())[:200]!r}")
                return
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    events.append(line[6:])
                    last_at = time.monotonic()
                    first_at = first_at or last_at
        if events[-1:] != ["[DONE]"] or any('"error"' in e for e in events):
            self.failures.append(f"bad stream end: {events[-2:]}")
            return
        self.latencies.append(time.monotonic() - start)
        tokens = json.loads(events[-2])["meta_info"]["completion_tokens"] if len(events) > 1 else 0
        if tokens > 1:
            self.tpots.append((last_at - first_at) / (tokens - 1))

    async def disconnect(self, http: httpx.AsyncClient, rng: random.Random) -> None:
        async with http.stream("POST", "/generate", json=self.body(rng, uuid.uuid4().hex)) as r:
            async for _ in r.aiter_lines():
                if rng.random() < 0.3:
                    break

    async def abort(self, http: httpx.AsyncClient, rng: random.Random) -> None:
        rid = uuid.uuid4().hex
        async with http.stream("POST", "/generate", json=self.body(rng, rid)) as r:
            async for _ in r.aiter_lines():
                await http.post("/abort_request", json={"rid": rid})
                break
            async for _ in r.aiter_lines():
                pass

    async def invalid(self, http: httpx.AsyncClient, rng: random.Random) -> None:
        raw = json.dumps(rng.choice(INVALID), allow_nan=True)
        r = await http.post("/generate", content=raw, headers={"Content-Type": "application/json"})
        if not 400 <= r.status_code < 500:
            self.failures.append(f"invalid request answered {r.status_code}")


async def sample_rss(pid: int, deadline: float, out: dict[int, list[float]], every_s: float) -> None:
    while time.monotonic() < deadline:
        for p in server_pids(pid):
            out.setdefault(p, []).append(rss_mb(p))
        await asyncio.sleep(every_s)


def quantile(values: list[float], q: float) -> float | None:
    ordered = sorted(values)
    return round(ordered[int(q * (len(ordered) - 1))], 4) if ordered else None


async def run(
    url: str, pid: int, clients: int, seconds: float, max_tokens: int, hostile: bool = False
) -> dict:
    deadline = time.monotonic() + seconds
    soak = Soak(url, deadline, max_tokens)
    bad = HostileClient(url, deadline) if hostile else None
    rss: dict[int, list[float]] = {}
    await asyncio.gather(
        sample_rss(pid, deadline, rss, max(seconds / 30, 1)),
        *(soak.client(i) for i in range(clients)),
        *([bad.run()] if bad else []),
    )
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        for _ in range(100):
            stats = (await http.get("/get_server_info")).json()["stats"]
            if stats["num_running"] == 0 and stats["num_queued"] == 0 and stats["kv_used"] == 0:
                break
            await asyncio.sleep(0.2)
    for p in rss:
        rss[p].append(rss_mb(p))
    third = [len(v) // 3 for v in rss.values()]
    return {
        "requests": soak.counts,
        "failed_valid": len(soak.failures),
        "failures": soak.failures[:5],
        "latency_p50_s": quantile(soak.latencies, 0.5),
        "latency_p99_s": quantile(soak.latencies, 0.99),
        "tpot_p50_s": quantile(soak.tpots, 0.5),
        "tpot_p99_s": quantile(soak.tpots, 0.99),
        "rss_mb": {
            str(p): {
                "start": round(v[0], 1),
                "after_warmup": round(v[t], 1),
                "end": round(v[-1], 1),
                "max": round(max(v), 1),
            }
            for (p, v), t in zip(rss.items(), third)
            if v
        },
        "kv_whole": stats["kv_used"] == 0 and stats["kv_free"] + stats["kv_cached"] == stats["kv_total"],
        "kv": {k: stats[k] for k in ("kv_free", "kv_cached", "kv_used", "kv_total")},
        **({"hostile": bad.report()} if bad else {}),
    }


def one_run(args: argparse.Namespace, hostile: bool) -> dict:
    """One soak on a fresh server."""
    with launch_server(
        model=args.model, max_total_tokens=args.max_total_tokens, max_queued_requests=4 * args.clients
    ) as server:
        return asyncio.run(
            run(server.url, server.pid, args.clients, args.minutes * 60, args.max_tokens, hostile)
        )


def compare(plain: dict, hostile: dict) -> dict:
    """What ``--compare`` reports: the hostile run against the plain one."""
    ratio = None
    if plain["tpot_p99_s"] and hostile["tpot_p99_s"]:
        ratio = round(hostile["tpot_p99_s"] / plain["tpot_p99_s"], 3)
    return {
        "normal_failures": {"plain": plain["failed_valid"], "hostile": hostile["failed_valid"]},
        "tpot_p99_s": {"plain": plain["tpot_p99_s"], "hostile": hostile["tpot_p99_s"]},
        "tpot_p99_ratio_hostile_over_plain": ratio,
        "tpot_goal_met": ratio is not None and ratio <= 1.5,
        "rss_mb_start_end": {
            name: {p: (v["start"], v["end"]) for p, v in run["rss_mb"].items()}
            for name, run in (("plain", plain), ("hostile", hostile))
        },
        "kv_whole": {"plain": plain["kv_whole"], "hostile": hostile["kv_whole"]},
        "hostile_answers": hostile["hostile"]["answers"],
        "hostile_broken": hostile["hostile"]["broken_count"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--clients", type=int, default=96)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--max-total-tokens", type=int, default=6000, help="KV slots (small: pressure)")
    ap.add_argument("--repeats", type=int, default=1, help="runs, each on a fresh server")
    ap.add_argument("--hostile", action="store_true", help="one hostile client beside the normal ones")
    ap.add_argument("--compare", action="store_true", help="a plain run, then a hostile one; compared")
    add_json_argument(ap)
    args = ap.parse_args()
    if args.compare:
        plain = one_run(args, hostile=False)
        print(json.dumps({"command": vars(args), "run": "plain", **plain}, indent=1), flush=True)
        hostile = one_run(args, hostile=True)
        print(json.dumps({"command": vars(args), "run": "hostile", **hostile}, indent=1), flush=True)
        summary = compare(plain, hostile)
        print(json.dumps({"compare": summary}, indent=1), flush=True)
        headline = [
            {
                "label": "normal clients beside the hostile one",
                "metric": "failed",
                "value": hostile["failed_valid"],
            },
            {
                "label": "TPOT p99 hostile / plain",
                "metric": "ratio",
                "value": summary["tpot_p99_ratio_hostile_over_plain"],
            },
        ]
        write_results(args.json, __spec__.name, headline, [plain, hostile, summary])
        return
    results = []
    for repeat in range(args.repeats):
        result = one_run(args, args.hostile)
        print(json.dumps({"command": vars(args), "repeat": repeat + 1, **result}, indent=1), flush=True)
        results.append(result)
    headline = [
        {
            "label": f"repeat {i + 1}, {args.clients} clients",
            "metric": "failed valid requests",
            "value": r["failed_valid"],
        }
        for i, r in enumerate(results)
    ]
    write_results(args.json, __spec__.name, headline, results)


if __name__ == "__main__":
    main()
