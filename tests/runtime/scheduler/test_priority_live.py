"""Priority scheduling on a real Scheduler over the tiny model: a late high priority is admitted before
earlier low ones when the batch is full, retraction takes the low one, and every KV slot comes back."""

from __future__ import annotations

import numpy as np
import pytest

from radixlm.runtime.messages import TokenizedGenerateReq
from radixlm.runtime.sampling.sampling_params import SamplingParams
from radixlm.runtime.scheduler.scheduler import Scheduler
from radixlm.runtime.server_args import ServerArgs


@pytest.fixture(scope="module")
def scheduler(tiny_llama_dir):
    args = ServerArgs(
        model=tiny_llama_dir,
        device="cpu",
        kv_cache_gb=0.01,
        context_length=256,
        max_running_requests=2,
        enable_priority_scheduling=True,
        priority_aging_rate=0.0,
    )
    sched = Scheduler(args)
    yield sched
    sched.shutdown()


def request(rid: str, priority: int | None, first: int) -> TokenizedGenerateReq:
    ids = np.arange(first, first + 5, dtype=np.int32)
    params = SamplingParams(max_new_tokens=4, temperature=0, ignore_eos=True)
    return TokenizedGenerateReq(rid, ids, params, priority=priority)


def first_token_order(scheduler: Scheduler) -> list[str]:
    order: list[str] = []
    for _ in range(200):
        for out in scheduler.step():
            if out.rid not in order and len(out.new_token_ids) > 0:
                order.append(out.rid)
        if not scheduler.has_work():
            return order
    raise AssertionError("scheduler did not go idle")


def assert_all_kv_returned(scheduler: Scheduler) -> None:
    scheduler.check_kv_integrity()
    stats = scheduler.stats()
    assert stats["kv_used"] == 0 and stats["kv_free"] + stats["kv_cached"] == stats["kv_total"]


def test_a_late_high_priority_is_admitted_before_earlier_low_ones(scheduler):
    for i in range(4):
        scheduler.handle(request(f"low{i}", None, 10 + 20 * i))  # no priority: 0
    scheduler.step()  # the batch is full: low0 and low1 run
    assert [r.rid for r in scheduler.running] == ["low0", "low1"]
    scheduler.handle(request("high", 7, 200))
    stats = scheduler.stats()
    assert stats["queued_by_priority"] == {"0": 2, "7": 1} and stats["running_by_priority"] == {"0": 2}
    order = first_token_order(scheduler)
    assert order.index("high") < order.index("low2") < order.index("low3")
    assert_all_kv_returned(scheduler)


def test_retraction_takes_the_low_priority_first(scheduler):
    scheduler.handle(request("r-high", 5, 130))
    scheduler.handle(request("r-low", -1, 150))
    scheduler.step()
    scheduler.step()  # both have decoded a token; the low one generated as many as the high one
    assert {r.rid for r in scheduler.running} == {"r-high", "r-low"}
    scheduler._retract_one()
    assert [r.rid for r in scheduler.running] == ["r-high"] and scheduler.waiting[0].rid == "r-low"
    first_token_order(scheduler)
    assert_all_kv_returned(scheduler)


def test_the_engine_takes_a_priority_and_names_a_bad_one(tiny_llama_dir):
    from tests.helpers.engines import make_engine

    engine = make_engine(tiny_llama_dir, device="cpu", enable_priority_scheduling=True)
    try:
        params = {"max_new_tokens": 3, "temperature": 0, "ignore_eos": True}
        plain = engine.generate("hello", params)
        assert engine.generate("hello", params, priority=9)["text"] == plain["text"]
        with pytest.raises(ValueError, match="priority must be an integer"):
            engine.generate("hello", params, priority="high")
    finally:
        engine.shutdown()


def test_a_much_higher_priority_takes_a_running_row(scheduler):
    outs: dict[str, list[int]] = {}
    scheduler.handle(request("p-low0", 0, 40))
    scheduler.handle(request("p-low1", 1, 60))
    scheduler.step()
    scheduler.step()
    assert {r.rid for r in scheduler.running} == {"p-low0", "p-low1"}
    scheduler.handle(request("p-urgent", 11, 80))  # 11 - 0 >= the default threshold of 10
    for out in scheduler.step():
        outs.setdefault(out.rid, []).extend(np.asarray(out.new_token_ids).tolist())
    assert {r.rid for r in scheduler.running} == {"p-low1", "p-urgent"}
    assert scheduler.waiting[0].rid == "p-low0" and scheduler.waiting[0].num_retractions == 1
    for _ in range(50):
        for out in scheduler.step():
            outs.setdefault(out.rid, []).extend(np.asarray(out.new_token_ids).tolist())
        if not scheduler.has_work():
            break
    assert all(len(outs[rid]) == 4 for rid in ("p-low0", "p-low1", "p-urgent"))
    assert_all_kv_returned(scheduler)


def test_a_long_queue_of_low_priorities_does_not_age_past_a_new_high_one(tiny_llama_dir):
    """A batch job queued for a minute behind its own requests earns no aging: a new interactive
    request (priority 10, enough to preempt) still takes a row at once, and no row changes hands in
    vain (before, the queue's age outranked it: a row was retracted for it and given to a batch one)."""
    args = ServerArgs(
        model=tiny_llama_dir,
        device="cpu",
        kv_cache_gb=0.01,
        context_length=256,
        max_running_requests=2,
        enable_priority_scheduling=True,
    )
    sched = Scheduler(args)
    try:
        for i in range(4):
            sched.handle(request(f"low{i}", 0, 10 + 20 * i))
        sched.step()
        for req in sched.waiting:
            req.arrived_at -= 60.0  # queued for a minute behind low0 and low1
        sched.handle(request("high", 10, 200))
        order = first_token_order(sched)
        assert order.index("high") < order.index("low2") < order.index("low3")
        assert_all_kv_returned(sched)
    finally:
        sched.shutdown()
