"""--queue-timeout also covers a request waiting for its grammar to compile: past it, the request
ends with the queue timeout's clear error, lets go of the compile, and the others go on."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import pytest

from tests.helpers.engines import make_engine

SLOW_COMPILE_S = 4.0


@pytest.fixture(scope="module")
def engine(tiny_llama_dir):
    engine = make_engine(tiny_llama_dir, queue_timeout=0.5, grammar_compile_timeout=30.0)
    yield engine
    engine.shutdown()


def _slow_compiles(backend, monkeypatch) -> None:
    """Compiles finish (with the real compiled grammar) only after ``SLOW_COMPILE_S``."""
    real_submit = backend.submit

    def slow_submit(kind, text):
        slow: Future = Future()
        real = real_submit(kind, text)
        timer = threading.Timer(SLOW_COMPILE_S, lambda: slow.set_result(real.result()))
        timer.daemon = True
        timer.start()
        return slow

    monkeypatch.setattr(backend, "submit", slow_submit)


def test_a_grammar_wait_past_the_queue_timeout_fails_with_a_clear_error(engine, monkeypatch):
    _slow_compiles(engine.scheduler.grammars._get_backend(), monkeypatch)
    started = time.monotonic()
    with pytest.raises(
        RuntimeError,
        match=r"waited more than 0.5 s for its grammar to compile "
        r"\(--queue-timeout\)",
    ):
        engine.generate("constrained", {"max_new_tokens": 8, "regex": "[a-z]{1,8}", "temperature": 0})
    assert time.monotonic() - started < SLOW_COMPILE_S  # it did not wait for the compile
    info = engine.get_server_info()
    assert info["num_grammar_queue"] == 0 and info["num_queued"] == 0
    plain = engine.generate("unconstrained", {"max_new_tokens": 4, "temperature": 0})
    assert len(plain["output_ids"]) == 4
    engine.check_kv_integrity()


def test_a_fast_compile_within_the_timeout_still_runs(engine):
    out = engine.generate("constrained", {"max_new_tokens": 8, "regex": "[a-z]{1,8}", "temperature": 0})
    assert out["text"].isalpha() and out["text"].islower()
