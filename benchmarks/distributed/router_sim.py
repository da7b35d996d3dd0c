"""The routing policies alone, simulated: a multi-tenant workload over N replicas, each a FIFO server
with an LRU prefix cache, costs per token (prefill of uncached tokens, cached tokens, decode).

Used by ``router.py``; pure Python, seconds to run.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass

from radixlm.runtime.router.policy import RoutingPolicy
from radixlm.runtime.router.prefix_index import ApproxPrefixIndex

# Per-token costs (arbitrary time units): a cached prompt token is ~20x cheaper than a computed one.
PREFILL_COST, CACHED_COST, DECODE_COST = 1.0, 0.05, 4.0


@dataclass
class Request:
    arrival: float
    prompt: list[int]
    decode_tokens: int


def multi_tenant_workload(
    tenants: int = 8,
    users_per_tenant: int = 32,
    turns: int = 3,
    system_len: int = 1024,
    turn_len: int = 48,
    decode_tokens: int = 32,
    rate: float = 1.0,
    seed: int = 0,
) -> list[Request]:
    """``tenants`` long system prompts; each user's turns extend their own history; arrivals
    interleaved at random (Poisson, ``rate`` requests per unit of time)."""
    rng = random.Random(seed)
    systems = [[rng.randrange(1000, 50000) for _ in range(system_len)] for _ in range(tenants)]
    sessions = []
    for t in range(tenants):
        for _ in range(users_per_tenant):
            history = list(systems[t])
            turns_of_user = []
            for _ in range(turns):
                history = history + [rng.randrange(1000, 50000) for _ in range(turn_len)]
                turns_of_user.append(list(history))
                history = history + [rng.randrange(1000, 50000) for _ in range(decode_tokens)]
            sessions.append(turns_of_user)
    order = [s for s in range(len(sessions)) for _ in range(turns)]
    rng.shuffle(order)
    next_turn = [0] * len(sessions)
    requests, clock = [], 0.0
    for s in order:  # a user's turns stay in order; users interleave
        clock += rng.expovariate(rate)
        requests.append(Request(clock, sessions[s][next_turn[s]], decode_tokens))
        next_turn[s] += 1
    return requests


def simulate(
    requests: list[Request], replicas: int, policy_name: str, cache_tokens: int, **policy_kwargs
) -> dict:
    """Route and serve ``requests``; returns the hit rate, load balance (max/mean requests per replica
    and max/mean busy time per replica) and the mean latency."""
    policy = RoutingPolicy(replicas, policy_name, **policy_kwargs)
    caches = [ApproxPrefixIndex(capacity=cache_tokens // 16) for _ in range(replicas)]
    free_at = [0.0] * replicas
    busy = [0.0] * replicas
    finishing: list[tuple[float, int]] = []
    hits = total = 0
    latency = 0.0
    for req in requests:
        while finishing and finishing[0][0] <= req.arrival:
            policy.finished(heapq.heappop(finishing)[1])
        r = policy.choose(req.prompt)
        policy.started(r)
        cached = caches[r].match(req.prompt)
        caches[r].insert(req.prompt)
        hits, total = hits + cached, total + len(req.prompt)
        cost = (
            (len(req.prompt) - cached) * PREFILL_COST + cached * CACHED_COST + req.decode_tokens * DECODE_COST
        )
        start = max(req.arrival, free_at[r])
        free_at[r] = start + cost
        busy[r] += cost
        latency += free_at[r] - req.arrival
        heapq.heappush(finishing, (free_at[r], r))
    counts = [s.routed for s in policy.replicas]
    return {
        "hit_rate": hits / total,
        "max_over_mean": max(counts) / (sum(counts) / replicas),
        "busy_max_over_mean": max(busy) / (sum(busy) / replicas),
        "mean_latency": latency / len(requests),
    }
