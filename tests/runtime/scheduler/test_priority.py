"""Priority scheduling: admission order, aging and the retraction choice (scheduler/priority.py)."""

from __future__ import annotations

from radixlm.runtime.scheduler.prefill_planner import PrefillPlanner
from radixlm.runtime.scheduler.priority import (
    accrue_aging,
    admission_order,
    preemption_victim,
    retraction_victim,
)
from radixlm.runtime.server_args import ServerArgs
from tests.runtime.scheduler.scheduler_fakes import make_cache, make_req

ON = ServerArgs(enable_priority_scheduling=True, priority_aging_rate=0.0)


def _req(rid: str, priority: int, first: int, arrived_at: float = 100.0, outputs: int = 0):
    req = make_req(rid, list(range(first, first + 4)))
    req.priority, req.arrived_at = priority, arrived_at
    req.output_ids = [1] * outputs
    return req


def test_a_higher_priority_goes_first_and_ties_keep_the_policy_order():
    reqs = [_req("low", 0, 0), _req("high", 5, 10), _req("mid1", 2, 20), _req("mid2", 2, 30)]
    assert [r.rid for r in admission_order(reqs, ON)] == ["high", "mid1", "mid2", "low"]


def test_disabled_priority_changes_nothing():
    reqs = [_req("low", 0, 0), _req("high", 5, 10)]
    assert admission_order(reqs, ServerArgs()) == reqs
    running = [_req("a", 0, 0, outputs=3), _req("b", 9, 10, outputs=1)]
    assert retraction_victim(running, ServerArgs()).rid == "b"


def test_low_values_first_flips_the_sign():
    args = ServerArgs(
        enable_priority_scheduling=True, schedule_low_priority_values_first=True, priority_aging_rate=0.0
    )
    reqs = [_req("big", 5, 0), _req("small", -1, 10)]
    assert [r.rid for r in admission_order(reqs, args)] == ["small", "big"]
    assert retraction_victim(reqs, args).rid == "big"


def test_aging_lets_a_low_priority_passed_over_long_enough_overtake():
    args = ServerArgs(enable_priority_scheduling=True, priority_aging_rate=0.5)
    low, high = _req("low", 0, 0), _req("high", 10, 10)
    running_high = [_req("running_high", 10, 20)]
    accrue_aging([low, high], running_high, args, elapsed_s=19.0)  # 0 + 9.5 < 10: not yet
    assert (low.passed_over_s, high.passed_over_s) == (19.0, 0.0)  # "high" is not outranked
    assert [r.rid for r in admission_order([low, high], args)] == ["high", "low"]
    accrue_aging([low, high], running_high, args, elapsed_s=1.0)  # 0 + 10 ties: the priority decides
    assert [r.rid for r in admission_order([low, high], args)] == ["high", "low"]
    accrue_aging([low, high], running_high, args, elapsed_s=1.0)  # 0 + 10.5 > 10
    assert [r.rid for r in admission_order([high, low], args)] == ["low", "high"]


def test_waiting_behind_its_own_priority_earns_no_aging():
    """A long batch job's queue (everything running is as urgent as the waiting request) does not
    age, so an interactive request arriving after minutes still goes first."""
    args = ServerArgs(enable_priority_scheduling=True, priority_aging_rate=1.0)
    queued = _req("batch", 0, 0, arrived_at=0.0)
    accrue_aging([queued], [_req("batch_running", 0, 10)], args, elapsed_s=600.0)
    assert queued.passed_over_s == 0.0
    accrue_aging([queued], [], args, elapsed_s=600.0)
    assert queued.passed_over_s == 0.0
    assert [r.rid for r in admission_order([queued, _req("turn", 10, 20)], args)] == ["turn", "batch"]
    accrue_aging([queued], [_req("turn", 10, 20)], ServerArgs(priority_aging_rate=1.0), elapsed_s=5.0)
    assert queued.passed_over_s == 0.0  # priority scheduling off: nothing to age


def test_retraction_takes_the_lowest_priority_then_the_fewest_outputs():
    running = [_req("high", 5, 0, outputs=1), _req("low_long", 0, 10, outputs=9)]
    running.append(_req("low", 0, 20, outputs=2))
    assert retraction_victim(running, ON).rid == "low"
    running.pop(2)
    assert retraction_victim(running, ON).rid == "low_long"  # though it generated more than "high"


def test_planner_admits_the_higher_priority_into_the_last_row():
    args = ServerArgs(
        enable_priority_scheduling=True,
        max_running_requests=1,
        new_token_ratio=0.0,
        chunked_prefill_size=0,
        schedule_policy="fcfs",
    )
    planner = PrefillPlanner(args, make_cache(256))
    waiting = [_req("early_low", 0, 0), _req("late_high", 3, 50)]
    assert [r.rid for r in planner.plan(waiting, [], None)] == ["late_high"]


def test_preemption_needs_full_threshold_and_ignores_aging():
    args = ServerArgs(
        enable_priority_scheduling=True, priority_preemption_threshold=10, priority_aging_rate=5.0
    )
    running = [_req("mid", 5, 0), _req("low", 0, 10)]
    assert preemption_victim([_req("w9", 9, 20)], running, args) is None  # 9 - 0 < 10
    assert preemption_victim([_req("w10", 10, 20)], running, args).rid == "low"
    aged = _req("aged", 0, 30)
    aged.passed_over_s = 100.0  # aging orders admission, never preempts
    assert preemption_victim([aged], running, args) is None
    # the aged request is admitted before a w10 now, so preempting for w10 would hand it the row
    assert preemption_victim([aged, _req("w10", 10, 20)], running, args) is None
    assert preemption_victim([_req("w10", 10, 20)], running, ServerArgs()) is None
