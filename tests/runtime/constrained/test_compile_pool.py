"""Compile isolation: slow compiles do not starve quick ones, deadlines stop work, one compile per grammar."""

from __future__ import annotations

import json
import threading
import time

import pytest

from radixlm.runtime.constrained import GrammarBackend
from radixlm.runtime.constrained.compile_pool import CompilePool
from radixlm.runtime.constrained.outlines import workers
from tests.helpers.tokenizers import tiny_byte_level_tokenizer

# outlines-core needs far more than a minute for this schema (untyped properties, no extras allowed).
SLOW_FOR_OUTLINES = json.dumps({"properties": {"foo": {}, "bar": {}}, "additionalProperties": False})


def _sleeper(seconds: float, stopped: threading.Event):
    def task(job):
        job.set_kill(stopped.set)
        stopped.wait(seconds)
        return "slow"

    return task


def test_quick_compile_is_not_queued_behind_slow_ones():
    pool = CompilePool(max_concurrent=1, slow_after_s=0.2)
    stops = [threading.Event() for _ in range(3)]
    slow = [pool.submit(_sleeper(30, s), timeout_s=60) for s in stops]
    start = time.monotonic()
    quick = pool.submit(lambda job: "quick", timeout_s=60)
    assert quick.result(timeout=10) == "quick"
    assert time.monotonic() - start < 5, "the quick compile waited for the slow ones"
    assert not any(f.done() for f in slow)
    pool.shutdown()
    assert all(s.is_set() for s in stops), "shutdown stops running compiles"


def test_deadline_fails_the_future_and_stops_the_compile():
    pool = CompilePool(max_concurrent=1)
    stopped = threading.Event()
    future = pool.submit(_sleeper(60, stopped), timeout_s=0.5)
    with pytest.raises(TimeoutError, match="timed out after 0.5 s"):
        future.result(timeout=10)
    assert stopped.wait(5)
    assert pool.submit(lambda job: 7, timeout_s=5).result(timeout=10) == 7
    assert pool.stats["timed_out"] == 1
    pool.shutdown()


def test_concurrency_cap_holds_for_young_compiles():
    pool = CompilePool(max_concurrent=2, slow_after_s=30)
    running, peak, lock = [0], [0], threading.Lock()

    def task(job):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1

    for f in [pool.submit(task, timeout_s=30) for _ in range(10)]:
        f.result(timeout=30)
    assert peak[0] == 2
    pool.shutdown()


@pytest.mark.parametrize("engine", ["llguidance", "outlines"])
def test_identical_grammars_compile_once_when_requested_together(engine):
    tok = tiny_byte_level_tokenizer()
    be = GrammarBackend(tok, [tok.eos_token_id], vocab_size=len(tok), backend=engine)
    futures: list = []
    threads = [
        threading.Thread(target=lambda: futures.append(be.submit("regex", "[0-9]{3}x"))) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(f) for f in futures}) == 1
    futures[0].result(timeout=60)
    assert be.pool_stats["started"] == 1
    be.shutdown()


def test_starting_a_worker_does_not_count_against_the_compile_deadline(monkeypatch):
    """A fresh worker imports outlines before it can compile, which on a loaded machine took longer
    than a 2 s deadline: only the compile itself is held to the deadline."""
    real_popen = workers.subprocess.Popen

    def slow_start(*args, **kwargs):
        time.sleep(1.5)  # a process start on a busy machine
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(workers.subprocess, "Popen", slow_start)
    tok = tiny_byte_level_tokenizer()
    be = GrammarBackend(tok, [tok.eos_token_id], vocab_size=len(tok), backend="outlines", compile_timeout=0.3)
    assert be.submit("regex", "[ab]+").result(timeout=120).backend == "outlines"
    be.shutdown()


def test_outlines_compile_process_is_killed_at_the_deadline():
    tok = tiny_byte_level_tokenizer()
    be = GrammarBackend(tok, [tok.eos_token_id], vocab_size=len(tok), backend="outlines", compile_timeout=2)
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        be.submit("json", SLOW_FOR_OUTLINES).result(timeout=30)
    assert time.monotonic() - start < 15
    assert be.submit("regex", "[ab]+").result(timeout=30).backend == "outlines", "a new worker takes over"
    be.shutdown()
