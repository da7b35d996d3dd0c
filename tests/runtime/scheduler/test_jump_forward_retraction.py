"""A greedy request's jump-forward draft is checked against the model even when the request is
retracted before the mixed step that would have verified it: the output is plain greedy decoding."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from radixlm.runtime.messages import TokenizedGenerateReq
from radixlm.runtime.sampling.sampling_params import SamplingParams
from radixlm.runtime.scheduler import jump_forward_step
from radixlm.runtime.scheduler.scheduler import Scheduler
from tests.helpers.engines import tiny_scheduler

MAX_NEW_TOKENS = 10
DRAFT_LEN = 4


class AllowEverything:
    """A grammar matcher under which every token is allowed: its masked argmax is the plain argmax."""

    token_ids: list[int] = []
    max_rollback = 0

    def accept_token(self, token_id: int) -> bool:
        return True

    def broken_reason(self) -> str | None:
        return None

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        bitmask[row] = -1

    def is_terminated(self) -> bool:
        return False

    def rollback(self, n: int) -> None:
        pass

    def copy(self) -> AllowEverything:
        return AllowEverything()

    def forced_continuation(self) -> str:
        return "forced"


@pytest.fixture(scope="module")
def scheduler(tiny_llama_dir):
    with tiny_scheduler(
        tiny_llama_dir, max_total_tokens=1024, enable_jump_forward=True, jump_forward_max_batch=8
    ) as sched:
        yield sched


def _generate(sched: Scheduler, rid: str, constrained: bool, on_step=None) -> list[int]:
    params = SamplingParams(temperature=0, max_new_tokens=MAX_NEW_TOKENS, ignore_eos=True)
    sched.handle(TokenizedGenerateReq(rid, np.arange(5, 30, dtype=np.int32), params))
    if constrained:
        sched.waiting[-1].grammar = AllowEverything()
    tokens: list[int] = []
    for _ in range(100):
        if on_step is not None:
            on_step(sched)
        for out in sched.step():
            tokens.extend(out.new_token_ids.tolist())
        if not sched.has_work():
            sched.check_kv_integrity()
            return tokens
    raise AssertionError("the scheduler did not go idle")


def _wrong_draft_once(reference: list[int]):
    """A ``jump_forward`` whose first draft disagrees with the model at every token; none after."""
    calls = []

    def fake(matcher, output_ids, tokenizer, forced, retokenized):
        calls.append(len(output_ids))
        if len(calls) > 1:
            return None
        start = len(output_ids)
        wrong = [(t + 1) % 200 + 3 for t in reference[start : start + DRAFT_LEN]]
        return SimpleNamespace(keep_len=start, token_ids=wrong, matcher=matcher)

    return fake


def test_a_wrong_draft_is_rejected_in_the_mixed_step(scheduler, monkeypatch):
    reference = _generate(scheduler, "plain", constrained=False)
    monkeypatch.setattr(jump_forward_step, "jump_forward", _wrong_draft_once(reference))
    assert _generate(scheduler, "jumped", constrained=True) == reference
    assert scheduler.jump_forward.stats["draft_accepted"] == 0


def test_a_draft_that_survives_a_retraction_is_still_verified(scheduler, monkeypatch):
    reference = _generate(scheduler, "plain-2", constrained=False)
    monkeypatch.setattr(jump_forward_step, "jump_forward", _wrong_draft_once(reference))
    retracted = []

    def retract_the_drafted_request(sched: Scheduler) -> None:
        if not retracted and any(r.jump_draft is not None for r in sched.running):
            retracted.append(True)
            sched._retract_one()  # as KV pressure would before the mixed step

    tokens = _generate(scheduler, "retracted", constrained=True, on_step=retract_the_drafted_request)
    assert retracted, "the request never held a draft"
    assert tokens == reference
