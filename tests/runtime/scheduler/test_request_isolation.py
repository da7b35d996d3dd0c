"""One request's failure stays its own (the scheduler's intake) and --queue-timeout expires waiting requests,
on a real Scheduler over the tiny model."""

from __future__ import annotations

import numpy as np
import pytest

from radixlm.runtime.messages import TokenizedGenerateReq
from radixlm.runtime.sampling.sampling_params import SamplingParams
from radixlm.runtime.scheduler.queue_timeout import QUEUE_TIMEOUT_STATUS, expire_waiting
from radixlm.runtime.scheduler.scheduler import Scheduler
from radixlm.runtime.server_args import ServerArgs


@pytest.fixture(scope="module")
def scheduler(tiny_llama_dir):
    sched = Scheduler(ServerArgs(model=tiny_llama_dir, device="cpu", kv_cache_gb=0.01, context_length=256))
    yield sched
    sched.shutdown()


GREEDY = SamplingParams(max_new_tokens=2, temperature=0)


def request(rid: str, **params) -> TokenizedGenerateReq:
    return TokenizedGenerateReq(
        rid, np.array([1, 2, 3], dtype=np.int32), SamplingParams(max_new_tokens=2, temperature=0, **params)
    )


def run_until_idle(scheduler: Scheduler) -> dict:
    outs = {}
    for _ in range(200):
        for out in scheduler.step():
            if out.finished:
                outs[out.rid] = out
        if not scheduler.has_work():
            return outs
    raise AssertionError("scheduler did not go idle")


def test_an_error_taking_in_one_request_fails_only_it(scheduler, monkeypatch):
    original = scheduler._admission_error

    def explode(req):
        if req.rid == "bad":
            raise RecursionError("maximum recursion depth exceeded")
        return original(req)

    monkeypatch.setattr(scheduler, "_admission_error", explode)
    assert scheduler.handle(request("good")) is None
    assert scheduler.handle(request("bad")) is None
    outs = run_until_idle(scheduler)
    assert outs["bad"].finish_reason["status_code"] == 500
    assert "RecursionError" in outs["bad"].finish_reason["message"]
    assert outs["good"].finish_reason["type"] == "length" and len(outs["good"].new_token_ids) == 2
    scheduler.check_kv_integrity()


def _raise_on(scheduler, monkeypatch, rid: str) -> None:
    """Make taking in request ``rid`` raise (its KV admission check)."""
    original = scheduler._admission_error

    def explode(req):
        if req.rid == rid:
            raise RuntimeError("intake exploded")
        return original(req)

    monkeypatch.setattr(scheduler, "_admission_error", explode)


def test_a_request_whose_intake_fails_leaves_the_request_index(scheduler, monkeypatch):
    _raise_on(scheduler, monkeypatch, "bad-index")
    scheduler.handle(request("bad-index"))
    assert scheduler.requests.named("bad-index") == []
    run_until_idle(scheduler)
    assert len(scheduler.requests) == 0


def test_a_child_whose_intake_fails_unpins_its_parent(scheduler, monkeypatch):
    scheduler.handle(TokenizedGenerateReq("parent", np.arange(3, 20, dtype=np.int32), GREEDY, pin_children=1))
    run_until_idle(scheduler)
    assert len(scheduler.pins) == 1
    _raise_on(scheduler, monkeypatch, "child")
    child = TokenizedGenerateReq("child", np.arange(3, 24, dtype=np.int32), GREEDY, unpin_rids=["parent"])
    scheduler.handle(child)
    assert len(scheduler.pins) == 0, "the failed child's parent stays pinned until its timeout"
    outs = run_until_idle(scheduler)
    assert outs["child"].finish_reason["status_code"] == 500
    assert scheduler.stats()["kv_protected"] == 0
    scheduler.check_kv_integrity()


def test_a_child_that_fails_before_it_is_a_request_unpins_its_parent(scheduler):
    scheduler.handle(
        TokenizedGenerateReq("parent-2", np.arange(3, 20, dtype=np.int32), GREEDY, pin_children=1)
    )
    run_until_idle(scheduler)
    assert len(scheduler.pins) == 1
    broken = TokenizedGenerateReq(
        "broken-child", np.arange(3, 24, dtype=np.int32), GREEDY, pin_children="many", unpin_rids=["parent-2"]
    )
    scheduler.handle(broken)
    assert len(scheduler.pins) == 0
    outs = run_until_idle(scheduler)
    assert outs["broken-child"].finish_reason["status_code"] == 500
    assert "ValueError" in outs["broken-child"].finish_reason["message"]
    assert len(scheduler.requests) == 0


def test_queue_timeout_expires_only_never_admitted_requests(scheduler):
    scheduler.handle(request("old"))
    scheduler.handle(request("admitted"))
    old, admitted = scheduler.waiting[-2:]
    admitted.admitted_once = True  # e.g. retracted after it ran
    finished = []
    expire_waiting(
        scheduler.waiting,
        5.0,
        lambda req, reason: finished.append((req.rid, reason)),
        now=old.arrived_at + 6.0,
    )
    assert [(rid, reason.status_code) for rid, reason in finished] == [("old", QUEUE_TIMEOUT_STATUS)]
    assert "queue-timeout" in finished[0][1].message
    assert scheduler.waiting == [admitted]
    admitted.admitted_once = False
    run_until_idle(scheduler)
    scheduler.check_kv_integrity()
