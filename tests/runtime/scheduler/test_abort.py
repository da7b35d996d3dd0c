"""Aborting queued, running and mid-prefill requests frees every row and KV slot they held."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from radixlm.runtime.messages import AbortReq, TokenizedGenerateReq, expand_parallel_samples
from radixlm.runtime.requests.request_ids import sample_rid
from radixlm.runtime.sampling.sampling_params import SamplingParams
from radixlm.runtime.scheduler.scheduler import Scheduler
from tests.helpers.engines import make_engine, tiny_scheduler

LONG = {"temperature": 0, "max_new_tokens": 400, "ignore_eos": True}


def _request(rid: str, length: int, max_new_tokens: int = 50) -> TokenizedGenerateReq:
    """A prompt of ``length`` tokens that shares no prefix with prompts of other rids."""
    first = sum(map(ord, rid)) % 250
    ids = (np.arange(first, first + length, dtype=np.int32) % 250) + 3
    params = SamplingParams(temperature=0, max_new_tokens=max_new_tokens, ignore_eos=True)
    return TokenizedGenerateReq(rid, ids, params)


@pytest.fixture(scope="module")
def scheduler(tiny_llama_dir):
    with tiny_scheduler(tiny_llama_dir, max_running_requests=2, chunked_prefill_size=16) as sched:
        yield sched


def _assert_all_free(sched: Scheduler) -> None:
    assert not sched.has_work()
    sched.check_kv_integrity()
    stats = sched.stats()
    assert stats["kv_used"] == 0 and stats["kv_free"] + stats["kv_cached"] == stats["kv_total"]
    assert sched.runner.req_to_token_pool.available_size() == sched.args.max_running_requests


def _drain(sched: Scheduler, max_steps: int = 500) -> dict[str, dict]:
    finished = {}
    for _ in range(max_steps):
        for out in sched.step():
            if out.finished:
                finished[out.rid] = out.finish_reason
        if not sched.has_work():
            return finished
    raise AssertionError("the scheduler did not go idle")


def test_abort_queued_running_and_chunked(scheduler):
    for rid, length in (("run-a", 10), ("run-b", 12), ("queued", 8)):
        scheduler.handle(_request(rid, length))
    for _ in range(3):
        scheduler.step()
    assert {r.rid for r in scheduler.running} == {"run-a", "run-b"}
    assert [r.rid for r in scheduler.waiting] == ["queued"]
    scheduler.handle(AbortReq("queued"))
    scheduler.handle(AbortReq("run-a"))
    finished = _drain(scheduler)
    assert finished["queued"]["type"] == "abort" and finished["run-a"]["type"] == "abort"
    assert finished["run-b"] == {"type": "length", "length": 50}
    _assert_all_free(scheduler)


def test_abort_in_the_middle_of_a_chunked_prefill(scheduler):
    scheduler.handle(_request("chunked", 100))
    scheduler.step()
    assert scheduler.chunked is not None and scheduler.chunked.kv_len == 16
    scheduler.handle(AbortReq("chunked"))
    assert _drain(scheduler)["chunked"]["type"] == "abort"
    _assert_all_free(scheduler)


def test_abort_names_one_request_or_every_sample_of_one(scheduler):
    parallel = _request("team-2", 6)
    parallel.sampling_params = SamplingParams(temperature=0, max_new_tokens=50, ignore_eos=True, n=2)
    samples = expand_parallel_samples(parallel)
    # "team-2-0" is what a sample's id used to be: now it is just another client's rid
    for req in [_request("team-1", 7), _request("team-1-x", 9), _request("team-2-0", 5), *samples]:
        scheduler.handle(req)
    scheduler.step()
    scheduler.handle(AbortReq("team-1"))  # not another client's "team-1-x"
    scheduler.handle(AbortReq("team-2"))  # both samples, not the client request "team-2-0"
    finished = _drain(scheduler)
    assert {rid for rid, reason in finished.items() if reason["type"] == "abort"} == {
        "team-1",
        sample_rid("team-2", 0),
        sample_rid("team-2", 1),
    }
    assert finished["team-1-x"] == finished["team-2-0"] == {"type": "length", "length": 50}
    _assert_all_free(scheduler)


def test_abort_unknown_rid_is_harmless(scheduler):
    scheduler.handle(AbortReq("nobody"))
    scheduler.handle(_request("ok", 5, max_new_tokens=3))
    assert _drain(scheduler) == {"ok": {"type": "length", "length": 3}}
    _assert_all_free(scheduler)


@pytest.fixture(scope="module")
def abort_engine(tiny_llama_dir):
    engine = make_engine(tiny_llama_dir, max_running_requests=1)
    yield engine
    engine.shutdown()


def test_abort_while_streaming_stops_the_stream(abort_engine):
    stream = abort_engine.generate("stream then abort", LONG, stream=True, rid="streamer")
    next(stream), next(stream)
    abort_engine.abort("streamer")
    received = 2
    with pytest.raises(RuntimeError, match="abort"):
        for _ in stream:
            received += 1
    assert received < LONG["max_new_tokens"]
    assert abort_engine.generate("after", {"temperature": 0, "max_new_tokens": 4})["output_ids"]


def test_abort_of_a_queued_request_leaves_the_running_one_alone(abort_engine):
    """With one running slot the second request queues behind a streaming one; aborting it ends it
    with an error and the first still runs to its full length."""
    params = {**LONG, "max_new_tokens": 480}
    first = abort_engine.generate("first prompt", params, stream=True, rid="first")
    next(first)
    error: list[BaseException] = []

    def run_second() -> None:
        try:
            abort_engine.generate("second prompt", params, rid="second")
        except RuntimeError as e:
            error.append(e)

    second = threading.Thread(target=run_second)
    second.start()
    deadline = time.monotonic() + 10
    while abort_engine.get_server_info()["num_queued"] == 0:
        assert time.monotonic() < deadline, "the second request never queued"
    abort_engine.abort("second")
    second.join(timeout=30)
    assert not second.is_alive() and "abort" in str(error[0])
    *_, last = first
    assert last["meta_info"]["finish_reason"] == {"type": "length", "length": 480}


def test_a_rid_in_flight_is_refused_and_the_first_request_is_unharmed(abort_engine):
    stream = abort_engine.generate("keep running", LONG, stream=True, rid="dup")
    next(stream)
    with pytest.raises(ValueError, match="rid 'dup' is already running"):
        abort_engine.generate("same rid", {"temperature": 0, "max_new_tokens": 4}, rid="dup")
    with pytest.raises(ValueError, match="rid 'twice' is already running"):
        abort_engine.generate(["a", "b"], {"temperature": 0, "max_new_tokens": 4}, rid=["twice", "twice"])
    items = [next(stream)] + list(stream)
    assert items[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": LONG["max_new_tokens"]}
    # finished: the rid is free again
    assert abort_engine.generate("reuse", {"temperature": 0, "max_new_tokens": 2}, rid="dup")["output_ids"]
