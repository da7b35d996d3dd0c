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


def batched_with_a_faulty_request(engine, params: dict) -> list:
    """Run rid ``faulty`` in a thread beside a batch of ``PROMPTS``: the errors the faulty request
    raised, then (last) the batch's outputs."""
    errors: list = []

    def run_faulty() -> None:
        try:
            engine.generate("the faulty one", params, rid="faulty")
        except RuntimeError as e:
            errors.append(e)

    thread = threading.Thread(target=run_faulty)
    thread.start()
    together = engine.generate(list(PROMPTS), params)
    thread.join(60)
    return errors + [together]


def test_a_failing_request_raises_and_its_batch_mates_complete(engine, monkeypatch):
    alone = {p: engine.generate(p, PARAMS)["output_ids"] for p in PROMPTS}
    real = sampler.apply_row_penalties

    def faulty(logits, i, req, eos):
        # >=: a verify step may accept a run of drafts past any one length
        if req.rid == "faulty" and len(req.output_ids) >= 5:
            raise OverflowError("penalty table overflow")
        real(logits, i, req, eos)

    monkeypatch.setattr(sampler, "apply_row_penalties", faulty)
    errors = batched_with_a_faulty_request(engine, PARAMS)
    together = errors.pop()
    assert [o["output_ids"] for o in together] == [alone[p] for p in PROMPTS]
    assert len(errors) == 1 and "penalty table overflow" in str(errors[0])
    assert "sampling failed for this request" in str(errors[0])
    engine.check_kv_integrity()
    monkeypatch.undo()
    assert engine.generate("faulty no more", PARAMS, rid="faulty")["output_ids"]  # the rid is free


def test_a_failing_jump_forward_check_fails_only_its_request(tiny_llama_dir, monkeypatch):
    """Greedy constrained requests jump forward and verify their drafts after the forward; a check
    that raises ends that request with an error, and its batch mates give their text alone."""
    from radixlm.runtime.scheduler.jump_forward_step import JumpForwardStep

    regex = r'\{"name": "[a-z]{1,6}", "age": [1-9][0-9]?, "city": "[a-z]{1,6}"\}'
    params = {"temperature": 0, "max_new_tokens": 48, "regex": regex}
    engine = make_engine(tiny_llama_dir, enable_jump_forward=True, jump_forward_max_batch=1_000_000)
    try:
        alone = {p: engine.generate(p, params)["text"] for p in PROMPTS}
        real_apply, real_check = JumpForwardStep.apply, JumpForwardStep._accepted_prefix
        faulty_drafts: list = []  # the objects themselves: a freed draft's id() can be reused
        checked: list = []

        def apply(self, req):
            jumped = real_apply(self, req)
            if req.rid == "faulty" and req.jump_draft is not None:
                faulty_drafts.append(req.jump_draft)
            return jumped

        def check(self, draft, logits):
            checked.append(draft)
            if any(draft is d for d in faulty_drafts):
                raise ArithmeticError("draft check exploded")
            return real_check(self, draft, logits)

        monkeypatch.setattr(JumpForwardStep, "apply", apply)
        monkeypatch.setattr(JumpForwardStep, "_accepted_prefix", check)
        errors = batched_with_a_faulty_request(engine, params)
        together = errors.pop()
        assert any(d is c for d in faulty_drafts for c in checked), (
            "the faulty request's draft was never verified"
        )
        assert [o["text"] for o in together] == [alone[p] for p in PROMPTS]
        assert len(errors) == 1 and "draft check exploded" in str(errors[0])
        assert "jump-forward draft" in str(errors[0])
        engine.check_kv_integrity()
    finally:
        engine.shutdown()
