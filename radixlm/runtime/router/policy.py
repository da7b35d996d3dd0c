"""Which replica gets a request: SGLang's router policies over per-replica load and prefix indexes.

``cache_aware``: the replica whose prompts share the longest prefix with this one (when the match
covers at least ``cache_threshold`` of it; otherwise the one with the least cached, to spread new
prefixes), among the replicas that are not overloaded. A replica is overloaded when its load passes
the least loaded one's by more than ``balance_abs_threshold`` and ``balance_rel_threshold`` times.
While the load is balanced that is SGLang's rule; once it is not, SGLang sends to the least loaded
replica, where this keeps the best cache match among those not overloaded (the least loaded is
always one of them), which keeps a hot prefix's later requests on the replicas that took it up.
Every policy records the prompt in the chosen replica's index, so switching policies keeps the
indexes meaningful.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

from radixlm.runtime.router.prefix_index import ApproxPrefixIndex, Key

POLICIES = ("cache_aware", "round_robin", "random", "shortest_queue")


@dataclass
class ReplicaState:
    """What the router knows of one replica: its requests in flight, its index, what it was sent."""

    index: ApproxPrefixIndex = field(default_factory=ApproxPrefixIndex)
    load: int = 0
    routed: int = 0
    alive: bool = True


class RoutingPolicy:
    """``choose(key)`` -> a replica number; the caller reports ``started``/``finished`` per request."""

    def __init__(
        self,
        num_replicas: int,
        policy: str = "cache_aware",
        balance_abs_threshold: int = 32,
        balance_rel_threshold: float = 1.5,
        cache_threshold: float = 0.5,
        seed: int | None = 0,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown routing policy {policy!r} (expected one of: {', '.join(POLICIES)})")
        if num_replicas < 1:
            raise ValueError("a router needs at least one replica")
        self.policy = policy
        self.replicas = [ReplicaState() for _ in range(num_replicas)]
        self.abs_threshold = balance_abs_threshold
        self.rel_threshold = balance_rel_threshold
        self.cache_threshold = cache_threshold
        self._rr = itertools.count()
        self._rng = random.Random(seed)

    def alive(self) -> list[int]:
        return [i for i, r in enumerate(self.replicas) if r.alive]

    def choose(self, key: Key, exclude: tuple[int, ...] = ()) -> int:
        """The replica for a request whose prompt is ``key``; records it there. Raises when none is alive."""
        live = [i for i in self.alive() if i not in exclude]
        if not live:
            raise RuntimeError("no live replica to route to")
        if self.policy == "round_robin":
            pick = live[next(self._rr) % len(live)]
        elif self.policy == "random":
            pick = self._rng.choice(live)
        elif self.policy == "shortest_queue":
            pick = self._least_loaded(live)
        else:
            pick = self._best_match(key, self._not_overloaded(live))
        self.replicas[pick].index.insert(key)
        self.replicas[pick].routed += 1
        return pick

    def started(self, replica: int) -> None:
        self.replicas[replica].load += 1

    def finished(self, replica: int) -> None:
        self.replicas[replica].load = max(0, self.replicas[replica].load - 1)

    def remove(self, replica: int) -> None:
        """Take ``replica`` out of rotation (a dead worker)."""
        self.replicas[replica].alive = False

    def _not_overloaded(self, live: list[int]) -> list[int]:
        lo = min(self.replicas[i].load for i in live)
        return [
            i
            for i in live
            if not (
                self.replicas[i].load - lo > self.abs_threshold
                and self.replicas[i].load > self.rel_threshold * lo
            )
        ]

    def _least_loaded(self, live: list[int]) -> int:
        return min(live, key=lambda i: (self.replicas[i].load, self.replicas[i].routed))

    def _best_match(self, key: Key, live: list[int]) -> int:
        matches = {i: self.replicas[i].index.match(key) for i in live}
        best = max(live, key=lambda i: (matches[i], -self.replicas[i].load))
        if matches[best] >= self.cache_threshold * max(len(key), 1) and matches[best] > 0:
            return best
        # No replica holds much of it: the one with the least cached (most room), then the least loaded.
        return min(live, key=lambda i: (len(self.replicas[i].index), self.replicas[i].load))

    def status(self) -> list[dict]:
        return [
            {"replica": i, "alive": r.alive, "load": r.load, "routed": r.routed, "index_blocks": len(r.index)}
            for i, r in enumerate(self.replicas)
        ]
