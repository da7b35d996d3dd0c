"""Data-parallel routing (issue 14): cache-aware against round-robin and shortest-queue.

1. ``--sim``: the policies alone over 8 and 32 replicas (``router_sim.py``): cache hit rate and load
   balance (max/mean requests per replica), against one replica holding every request.
2. ``--live``: a multi-tenant workload (8 long system prompts, many users each, interleaved) on a
   ``radixlm serve --dp-size 2`` server on this machine (one thread per replica), per policy: wall
   time, the replicas' cache hit rate and requests per replica.

    python -m benchmarks.distributed.router --sim [--json PATH]
    python -m benchmarks.distributed.router --live --model smollm2-135m
"""

from __future__ import annotations

import argparse
import concurrent.futures
import random
import time

from benchmarks.distributed.router_sim import multi_tenant_workload, simulate
from benchmarks.harness import add_json_argument, write_results

POLICIES = ("cache_aware", "round_robin", "shortest_queue")


def run_sim(replica_counts: list[int], users: int) -> list[dict]:
    """Prints the table; returns its rows."""
    rows = []
    print(
        "| replicas | policy | hit rate | single replica | max/mean requests | max/mean busy | mean latency |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|")
    for n in replica_counts:
        # Arrivals keep n replicas ~75% busy under cache_aware (overloaded under the others); each
        # replica caches 3 system prompts' worth of tokens.
        reqs = multi_tenant_workload(users_per_tenant=users * n // 8, rate=n / 350.0)
        cache = 3 * 1024 + 64 * 200
        single = simulate(reqs, 1, "cache_aware", cache_tokens=cache * n)
        variants = [
            ("cache_aware", {}),
            ("cache_aware", {"balance_abs_threshold": 2}),
            ("round_robin", {}),
            ("shortest_queue", {}),
        ]
        for policy, kwargs in variants:
            r = simulate(reqs, n, policy, cache_tokens=cache, **kwargs)
            name = policy + (f" abs={kwargs['balance_abs_threshold']}" if kwargs else "")
            rows.append({"replicas": n, "policy": name, "single_replica_hit_rate": single["hit_rate"], **r})
            print(
                f"| {n} | {name} | {r['hit_rate']:.1%} | {single['hit_rate']:.1%} | "
                f"{r['max_over_mean']:.2f} | {r['busy_max_over_mean']:.2f} | {r['mean_latency']:.0f} |"
            )
    return rows


def run_live(model: str, tenants: int, users: int, concurrency: int) -> list[dict]:
    """Prints the table; returns its rows."""
    import requests

    from radixlm.runtime.server.launch import launch_server

    rng = random.Random(0)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    systems = [f"System {t}: " + " ".join(rng.choice(words) for _ in range(220)) for t in range(tenants)]
    prompts = [
        systems[t] + f"\nUser {u}: question {rng.randrange(10**6)}?"
        for u in range(users)
        for t in range(tenants)
    ]
    print(
        f"{len(prompts)} requests, {tenants} tenants x {users} users, interleaved; "
        f"concurrency {concurrency}; dp_size 2, one thread per replica"
    )
    rows = []
    print("| policy | wall s | hit rate | requests per replica |")
    print("|---|---:|---:|---|")
    for policy in POLICIES:
        server = launch_server(model, dp_size=2, num_threads=1, load_balance_method=policy, kv_cache_gb=0.5)
        try:

            def one(text: str, url: str = server.url) -> None:
                params = {"max_new_tokens": 8, "temperature": 0}
                requests.post(
                    f"{url}/generate", timeout=600, json={"text": text, "sampling_params": params}
                ).raise_for_status()

            t0 = time.monotonic()
            with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
                list(pool.map(one, prompts))
            wall = time.monotonic() - t0
            info = requests.get(f"{server.url}/get_server_info", timeout=60).json()
            hit = info["cache_hit_tokens"] / max(info["cache_requested_tokens"], 1)
            routed = [r["routed"] for r in info["dp_replicas"]]
            print(f"| {policy} | {wall:.1f} | {hit:.1%} | {routed} |", flush=True)
            rows.append({"policy": policy, "wall_s": wall, "hit_rate": hit, "routed": routed})
        finally:
            server.shutdown()
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sim", action="store_true")
    p.add_argument("--live", action="store_true")
    p.add_argument("--replicas", default="8,32")
    p.add_argument("--users", type=int, default=32, help="users per tenant at 8 replicas (sim)")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--live-users", type=int, default=6)
    p.add_argument("--concurrency", type=int, default=8)
    add_json_argument(p)
    args = p.parse_args()
    results: dict[str, list[dict]] = {}
    if args.sim or not args.live:
        results["sim"] = run_sim([int(x) for x in args.replicas.split(",")], args.users)
    if args.live:
        results["live"] = run_live(args.model, 8, args.live_users, args.concurrency)
    headline = [
        {"label": f"{r['replicas']} replicas, {r['policy']}", "metric": "hit rate", "value": r["hit_rate"]}
        for r in results.get("sim", [])
    ] + [
        {"label": f"live, {r['policy']}", "metric": "hit rate", "value": r["hit_rate"]}
        for r in results.get("live", [])
    ]
    write_results(args.json, __spec__.name, headline, results)


if __name__ == "__main__":
    main()
