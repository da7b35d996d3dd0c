"""Failures inside the scheduler step: a sampling-side fault fails its own request (500 naming the
problem, KV and grammar released) while the rest of the batch completes with the tokens it would
have produced anyway; a forward pass that raises fails its batch and the loop goes on; one that
keeps raising is a broken runtime."""

from __future__ import annotations

import numpy as np
import pytest

from radixlm.runtime.messages import TokenizedGenerateReq
from radixlm.runtime.sampling import sampler
from radixlm.runtime.sampling.sampling_params import SamplingParams
from radixlm.runtime.scheduler.forward_failures import BrokenRuntime
from radixlm.runtime.scheduler.scheduler import Scheduler
from tests.helpers.engines import tiny_scheduler

GOOD = ("good-a", "good-b", "good-c")


def _request(rid: str, max_new_tokens: int = 12, **params) -> TokenizedGenerateReq:
    first = sum(map(ord, rid)) % 250
    ids = (np.arange(first, first + 9, dtype=np.int32) % 250) + 3
    return TokenizedGenerateReq(
        rid,
        ids,
        SamplingParams(max_new_tokens=max_new_tokens, ignore_eos=True, **{"temperature": 0, **params}),
    )


@pytest.fixture(scope="module")
def scheduler(tiny_llama_dir):
    with tiny_scheduler(tiny_llama_dir, max_running_requests=8, max_forward_failures=3) as sched:
        yield sched


def _run(sched: Scheduler, reqs: list[TokenizedGenerateReq], on_step=None, max_steps: int = 400) -> dict:
    """Submit ``reqs``, step until idle; returns rid -> (output ids, finish reason)."""
    outputs: dict[str, list[int]] = {r.rid: [] for r in reqs}
    finished: dict[str, dict] = {}
    for req in reqs:
        sched.handle(req)
    for _ in range(max_steps):
        if on_step is not None:
            on_step(sched)
        for out in sched.step():
            outputs[out.rid].extend(out.new_token_ids.tolist())
            if out.finished:
                finished[out.rid] = out.finish_reason
        if not sched.has_work():
            break
    assert not sched.has_work(), "the scheduler did not go idle"
    sched.check_kv_integrity()
    stats = sched.stats()
    assert stats["kv_used"] == 0 and stats["kv_free"] + stats["kv_cached"] == stats["kv_total"]
    return {rid: (outputs[rid], finished[rid]) for rid in outputs}


@pytest.fixture(scope="module")
def reference(scheduler):
    """What the good requests produce with no fault around."""
    return _run(scheduler, [_request(rid) for rid in GOOD])


def _assert_good_unharmed(result: dict, reference: dict) -> None:
    for rid in GOOD:
        assert result[rid] == reference[rid], rid


def test_a_raising_logit_bias_fails_only_its_request(scheduler, reference, monkeypatch):
    real = sampler.apply_row_logit_bias

    def faulty(logits, i, req):
        if req.rid == "bad":
            raise ValueError("bias table corrupted")
        real(logits, i, req)

    monkeypatch.setattr(sampler, "apply_row_logit_bias", faulty)
    result = _run(scheduler, [_request("good-a"), _request("bad"), _request("good-b"), _request("good-c")])
    _assert_good_unharmed(result, reference)
    reason = result["bad"][1]
    assert reason["type"] == "abort" and reason["status_code"] == 500
    assert "sampling failed" in reason["message"] and "bias table corrupted" in reason["message"]


def test_a_nan_row_fails_only_its_request(scheduler, reference, monkeypatch):
    real = sampler.apply_row_penalties

    def nan_row(logits, i, req, eos):
        real(logits, i, req, eos)
        if req.rid == "nan" and len(req.output_ids) == 3:
            logits[i, 7] = float("nan")

    monkeypatch.setattr(sampler, "apply_row_penalties", nan_row)
    reqs = [_request("good-a"), _request("nan", temperature=0.7), _request("good-b"), _request("good-c")]
    result = _run(scheduler, reqs)
    _assert_good_unharmed(result, reference)
    ids, reason = result["nan"]
    assert len(ids) == 3 and reason["status_code"] == 500 and "not finite" in reason["message"]


def _grammar_fault(method: str, rid: str):
    """A step hook that breaks ``method`` of ``rid``'s grammar matcher once it has one."""

    def hook(sched: Scheduler) -> None:
        for req in sched.running:
            if req.rid == rid and req.grammar is not None and method not in vars(req.grammar):

                def boom(*args, **kwargs):
                    raise RuntimeError(f"matcher {method} exploded")

                setattr(req.grammar, method, boom)

    return hook


@pytest.mark.parametrize("method", ["fill_bitmask", "accept_token"])
def test_a_failing_grammar_matcher_fails_only_its_request(scheduler, reference, method):
    reqs = [
        _request("good-a"),
        _request("constrained", regex="[a-z]{30}"),
        _request("good-b"),
        _request("good-c"),
    ]
    result = _run(scheduler, reqs, on_step=_grammar_fault(method, "constrained"))
    _assert_good_unharmed(result, reference)
    reason = result["constrained"][1]
    assert reason["status_code"] == 500 and f"matcher {method} exploded" in reason["message"]
    assert scheduler.stats()["num_grammar_queue"] == 0


def test_a_failing_forward_fails_its_batch_and_the_loop_goes_on(scheduler, reference, monkeypatch):
    real = scheduler.runner.forward
    calls = {"n": 0}

    def forward_failing_on_the_third_step(batch):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("device lost a kernel")
        return real(batch)

    monkeypatch.setattr(scheduler.runner, "forward", forward_failing_on_the_third_step)
    result = _run(scheduler, [_request("victim-1"), _request("victim-2", max_new_tokens=20)])
    for rid in ("victim-1", "victim-2"):
        ids, reason = result[rid]
        assert reason["status_code"] == 500 and "device lost a kernel" in reason["message"]
        assert "forward pass" in reason["message"] and len(ids) == 2  # prefill and one decode came
    monkeypatch.setattr(scheduler.runner, "forward", real)
    _assert_good_unharmed(_run(scheduler, [_request(rid) for rid in GOOD]), reference)
    assert scheduler.forward_failures.in_a_row == 0


def test_a_forward_failing_again_and_again_is_a_broken_runtime(scheduler, monkeypatch):
    def broken(batch):
        raise RuntimeError("weights are gone")

    monkeypatch.setattr(scheduler.runner, "forward", broken)
    for i in range(2):  # the first two failures fail their batch
        result = _run(scheduler, [_request(f"doomed-{i}")])
        assert "weights are gone" in result[f"doomed-{i}"][1]["message"]
    scheduler.handle(_request("last"))
    with pytest.raises(BrokenRuntime, match="3 times in a row.*weights are gone"):
        for _ in range(10):
            scheduler.step()
