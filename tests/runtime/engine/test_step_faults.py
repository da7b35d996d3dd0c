"""Through the in-process Engine: a request whose sampling fails raises an error naming the problem
while the requests batched with it return what they return alone."""
from __future__ import annotations

import threading

import pytest

from radixlm.runtime.sampling import sampler
from tests.helpers.engines import make_engine

PARAMS = {"temperature": 0, "max_new_tokens": 24, "ignore_eos": True}
PROMPTS = ("first prompt", "second prompt", "third prompt")


@pytest.fixture(scope="module")
def engine(tiny_llama_dir):
    engine = make_engine(tiny_llama_dir)
    yield engine
    engine.shutdown()


def test_a_failing_request_raises_and_its_batch_mates_complete(engine, monkeypatch):
    alone = {p: engine.generate(p, PARAMS)["output_ids"] for p in PROMPTS}
    real = sampler.apply_row_penalties

    def faulty(logits, i, req, eos):
        if req.rid == "faulty" and len(req.output_ids) == 5:
            raise OverflowError("penalty table overflow")
        real(logits, i, req, eos)

    monkeypatch.setattr(sampler, "apply_row_penalties", faulty)
    errors: list[BaseException] = []

    def run_faulty() -> None:
        try:
            engine.generate("the faulty one", PARAMS, rid="faulty")
        except RuntimeError as e:
            errors.append(e)

    thread = threading.Thread(target=run_faulty)
    thread.start()
    together = engine.generate(list(PROMPTS), PARAMS)
    thread.join(60)
    assert [o["output_ids"] for o in together] == [alone[p] for p in PROMPTS]
    assert len(errors) == 1 and "penalty table overflow" in str(errors[0])
    assert "sampling failed for this request" in str(errors[0])
    engine.check_kv_integrity()
    monkeypatch.undo()
    assert engine.generate("faulty no more", PARAMS, rid="faulty")["output_ids"]  # the rid is free
