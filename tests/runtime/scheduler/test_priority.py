"""Priority scheduling: admission order, aging and the retraction choice (scheduler/priority.py)."""

from __future__ import annotations

from radixlm.runtime.scheduler.prefill_planner import PrefillPlanner
from radixlm.runtime.scheduler.priority import admission_order, preemption_victim, retraction_victim
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
    assert [r.rid for r in admission_order(reqs, ON, now=100.0)] == ["high", "mid1", "mid2", "low"]


def test_disabled_priority_changes_nothing():
    reqs = [_req("low", 0, 0), _req("high", 5, 10)]
    assert admission_order(reqs, ServerArgs(), now=100.0) == reqs
    running = [_req("a", 0, 0, outputs=3), _req("b", 9, 10, outputs=1)]
    assert retraction_victim(running, ServerArgs()).rid == "b"


def test_low_values_first_flips_the_sign():
    args = ServerArgs(
        enable_priority_scheduling=True, schedule_low_priority_values_first=True, priority_aging_rate=0.0
    )
    reqs = [_req("big", 5, 0), _req("small", -1, 10)]
    assert [r.rid for r in admission_order(reqs, args, now=100.0)] == ["small", "big"]
    assert retraction_victim(reqs, args).rid == "big"


def test_aging_lets_a_long_waiting_low_priority_overtake():
    args = ServerArgs(enable_priority_scheduling=True, priority_aging_rate=0.5)
    old_low = _req("old_low", 0, 0, arrived_at=0.0)  # waited 100 s: 0 + 50
    new_high = _req("new_high", 10, 10, arrived_at=99.0)  # waited 1 s: 10 + 0.5
    assert [r.rid for r in admission_order([new_high, old_low], args, now=100.0)] == ["old_low", "new_high"]
    # 10 s of waiting is not yet enough (0 + 5 < 10 + 0.5)
    old_low.arrived_at = 90.0
    assert [r.rid for r in admission_order([old_low, new_high], args, now=100.0)] == ["new_high", "old_low"]


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
    aged = _req("aged", 0, 30, arrived_at=0.0)  # aging orders admission, never preempts
    assert preemption_victim([aged], running, args) is None
    assert preemption_victim([_req("w10", 10, 20)], running, ServerArgs()) is None
