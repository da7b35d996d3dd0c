"""Drive a scheduler to completion with speculation on or off and collect what each request got."""

from __future__ import annotations

from typing import Any

import numpy as np

from radixlm.runtime.messages import TokenizedGenerateReq
from radixlm.runtime.sampling.sampling_params import SamplingParams
from radixlm.runtime.scheduler.scheduler import Scheduler
from tests.helpers.engines import tiny_scheduler

# speculation off, as a baseline (the default speculates on the CPU)
PLAIN = {"speculative_algorithm": "NONE"}
# the speed check off: these tests need every draft verified, however fast
SPEC = {"speculative_algorithm": "NGRAM", "speculative_num_steps": 6, "speculative_speed_check": False}


def standalone(draft: str, **more: Any) -> dict[str, Any]:
    """Scheduler options for ``draft`` as a STANDALONE draft model, every draft verified at any batch
    size (the speed check off)."""
    return {
        "speculative_algorithm": "STANDALONE",
        "speculative_draft_model_path": draft,
        "speculative_num_steps": 4,
        "speculative_max_batch": 64,
        "speculative_speed_check": False,
        **more,
    }


def repetitive_prompt(length: int, period: int, first: int = 3) -> np.ndarray:
    """A prompt that repeats a ``period``-token pattern: n-gram proposals find copies in it."""
    return ((np.arange(length) % period) * 7 + first) % 250 + 3


def request(rid: str, ids: np.ndarray, logprobs: bool = False, **params: Any) -> TokenizedGenerateReq:
    params.setdefault("temperature", 0)
    params.setdefault("max_new_tokens", 40)
    params.setdefault("ignore_eos", True)
    return TokenizedGenerateReq(
        rid,
        np.asarray(ids, dtype=np.int32),
        SamplingParams(**params),
        return_logprob=logprobs,
        top_logprobs_num=2 if logprobs else 0,
    )


def run_all(sched: Scheduler, reqs: list[TokenizedGenerateReq], max_steps: int = 5000) -> dict[str, Any]:
    """Every request's tokens, output logprobs, finish reason and meta counts."""
    got: dict[str, Any] = {}
    for r in reqs:
        sched.handle(r)
    for _ in range(max_steps):
        for out in sched.step():
            entry = got.setdefault(out.rid, {"ids": [], "logprobs": [], "finish": None, "outs": 0})
            entry["ids"].extend(out.new_token_ids.tolist())
            entry["logprobs"].extend(out.output_token_logprobs or [])
            entry["outs"] += 1
            if out.finished:
                entry["finish"] = out.finish_reason
                entry["spec"] = getattr(out, "spec_meta", None)
        if not sched.has_work():
            break
    sched.check_kv_integrity()
    return got


def serve(model_dir: str, reqs: list[TokenizedGenerateReq], speculate: bool, **overrides: Any) -> tuple:
    """(outputs by rid, scheduler stats) of one scheduler serving ``reqs``."""
    args = {**(SPEC if speculate else PLAIN), **overrides}
    with tiny_scheduler(model_dir, **args) as sched:
        got = run_all(sched, reqs)
        return got, sched.stats()
