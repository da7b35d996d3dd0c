"""Priority scheduling (``--enable-priority-scheduling``): admission order and retraction choice.

A request's urgency is its ``priority`` (SGLang's sign: larger first, unless
``schedule_low_priority_values_first``) plus ``priority_aging_rate`` per second it has waited while a
higher priority ran (``accrue_aging``), so no request starves behind a steady stream of more urgent
ones. Only that time counts: a request waiting behind its own priority's queue (a long batch job) does
not gain on the more urgent requests that arrive later. Within one urgency the policy's order
(lpm/fcfs) stands: every sort here is stable (``reverse=True`` keeps equal keys in order).
"""

from __future__ import annotations

import time
from collections import Counter

from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.server_args import ServerArgs


def urgency(req: Req, args: ServerArgs) -> tuple[float, float]:
    """Higher is more urgent: the signed priority plus its aging; at a tie, the higher priority."""
    signed = signed_priority(req, args)
    return signed + args.priority_aging_rate * req.passed_over_s, signed


def signed_priority(req: Req, args: ServerArgs) -> float:
    """The priority with the configured sign: higher is more urgent."""
    return float(-req.priority if args.schedule_low_priority_values_first else req.priority)


def accrue_aging(waiting: list[Req], running: list[Req], args: ServerArgs, elapsed_s: float) -> None:
    """Credit ``elapsed_s`` of aging to each waiting request that a running one outranks."""
    if not (args.enable_priority_scheduling and args.priority_aging_rate > 0 and running and elapsed_s > 0):
        return
    top = max(signed_priority(r, args) for r in running)
    for req in waiting:
        if signed_priority(req, args) < top:
            req.passed_over_s += elapsed_s


class AgingClock:
    """Credits aging (``accrue_aging``) for the time between two scheduler steps."""

    def __init__(self) -> None:
        self.last = time.monotonic()

    def tick(self, waiting: list[Req], running: list[Req], args: ServerArgs) -> None:
        now = time.monotonic()
        accrue_aging(waiting, running, args, now - self.last)
        self.last = now


def admission_order(candidates: list[Req], args: ServerArgs) -> list[Req]:
    """``candidates`` (already in policy order) with the most urgent first; unchanged when disabled."""
    if not args.enable_priority_scheduling:
        return candidates
    return sorted(candidates, key=lambda r: urgency(r, args), reverse=True)


def retraction_victim(running: list[Req], args: ServerArgs) -> Req:
    """The running request to retract under KV pressure: the least urgent priority (without aging: it
    was admitted already), then the fewest generated tokens, then the latest in the batch."""

    def cheapest(pair: tuple[int, Req]) -> tuple[float, int, int]:
        index, req = pair
        signed = signed_priority(req, args) if args.enable_priority_scheduling else 0.0
        return (signed, len(req.output_ids), -index)

    return min(enumerate(running), key=cheapest)[1]


def count_by_priority(waiting: list[Req], running: list[Req]) -> dict[str, dict[str, int]]:
    """The scheduler's ``queued_by_priority`` and ``running_by_priority`` statistics (for /metrics)."""
    return {
        "queued_by_priority": {str(p): n for p, n in Counter(r.priority for r in waiting).items()},
        "running_by_priority": {str(p): n for p, n in Counter(r.priority for r in running).items()},
    }


def preemption_victim(waiting: list[Req], running: list[Req], args: ServerArgs) -> Req | None:
    """With every row taken: the running request to retract so the most urgent waiting one (the one
    admitted next) gets its row, when their priorities differ by at least
    ``priority_preemption_threshold`` (SGLang's rule). Priorities without aging: an aged request
    preempting others would make them trade rows; and when an aged request is admitted next, nothing
    is preempted (the row would go to it, not to the higher priority that asked)."""
    if not args.enable_priority_scheduling or not waiting or not running:
        return None
    best = signed_priority(max(waiting, key=lambda r: urgency(r, args)), args)
    victim = retraction_victim(running, args)
    return victim if best - signed_priority(victim, args) >= args.priority_preemption_threshold else None
