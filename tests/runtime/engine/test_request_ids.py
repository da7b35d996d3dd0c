"""Exact request ids in the Engine: an abort names one client rid and exactly the samples it spawned;
a client rid that looks like a sample's id is just another request."""

from __future__ import annotations

import threading

import pytest

from tests.helpers.engines import make_engine
from tests.helpers.waiting import wait_until

LONG = {"temperature": 0, "max_new_tokens": 300, "ignore_eos": True}


@pytest.fixture(scope="module")
def engine(tiny_llama_dir):
    engine = make_engine(tiny_llama_dir, max_running_requests=16)
    yield engine
    engine.shutdown()


def _run_in_background(engine, results: dict, key: str, prompt: str, params: dict) -> threading.Thread:
    def run() -> None:
        try:
            results[key] = engine.generate(prompt, params, rid=key)
        except Exception as e:  # noqa: BLE001 - the test inspects what each call ended with
            results[key] = e

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _wait_running(engine, count: int) -> None:
    info: dict = {}

    def running() -> bool:
        info.update(engine.get_server_info())
        return info["num_running"] + info["num_queued"] >= count

    wait_until(running, 20, lambda: f"{count} requests to run together (last: {info})", interval=0.01)


def test_abort_names_exactly_one_family(engine):
    """team-1 (n=1), team-1-x (another client), team-2 (n=2) and team-2-0 (a client rid equal to
    what team-2's first sample used to be called): aborting team-1 and team-2 ends team-1 and both
    of team-2's samples; team-1-x and team-2-0 run to their full length."""
    results: dict = {}
    short = {**LONG, "max_new_tokens": 150}
    threads = [
        _run_in_background(engine, results, "team-1", "one", LONG),
        _run_in_background(engine, results, "team-2", "two", {**LONG, "n": 2, "temperature": 0.8}),
    ]
    _wait_running(engine, 3)  # the short ones start after, so none can end before all five run
    threads += [
        _run_in_background(engine, results, "team-1-x", "other", short),
        _run_in_background(engine, results, "team-2-0", "look-alike", short),
    ]
    _wait_running(engine, 5)
    engine.abort("team-1")
    engine.abort("team-2")
    for thread in threads:
        thread.join(60)
    assert isinstance(results["team-1"], RuntimeError) and "abort" in str(results["team-1"])
    assert isinstance(results["team-2"], RuntimeError) and "abort" in str(results["team-2"])
    for rid in ("team-1-x", "team-2-0"):
        assert results[rid]["meta_info"]["finish_reason"] == {"type": "length", "length": 150}
        assert results[rid]["meta_info"]["id"] == rid
    assert engine.get_server_info()["num_running"] == 0
    engine.check_kv_integrity()


def test_abort_of_a_parent_with_n4_aborts_all_four(engine):
    results: dict = {}
    thread = _run_in_background(engine, results, "four", "four samples", {**LONG, "n": 4, "temperature": 1.0})
    _wait_running(engine, 4)
    engine.abort("four")
    thread.join(60)
    assert isinstance(results["four"], RuntimeError) and "abort" in str(results["four"])
    info = engine.get_server_info()
    assert info["num_running"] == 0 and info["num_queued"] == 0
    engine.check_kv_integrity()
    # the rid is free again, and its samples show the ids SGLang clients see
    out = engine.generate("again", {"max_new_tokens": 2, "n": 2}, rid="four")
    assert [o["meta_info"]["id"] for o in out] == ["four-0", "four-1"]


def test_a_sample_id_is_not_a_client_rid(engine):
    """Internal sample ids cannot be named: such a rid is refused, and aborting it touches nothing."""
    with pytest.raises(ValueError, match="rid must not contain control characters"):
        engine.generate("x", {"max_new_tokens": 2}, rid="four\x1f0")
    results: dict = {}
    thread = _run_in_background(engine, results, "pair", "pair", {**LONG, "max_new_tokens": 200, "n": 2})
    _wait_running(engine, 2)
    engine.abort("pair\x1f0")
    engine.abort("pair-0")
    thread.join(60)
    full = {"type": "length", "length": 200}
    assert [o["meta_info"]["finish_reason"] for o in results["pair"]] == [full, full]
    engine.check_kv_integrity()
