"""Mixed chunks: a long prompt that arrives while others decode is prefilled in small chunks that
ride along with the running decodes, and nobody's tokens change."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from radixlm.runtime.messages import TokenizedGenerateReq
from radixlm.runtime.sampling.sampling_params import SamplingParams
from radixlm.runtime.scheduler.scheduled_batch import BatchKind
from tests.helpers.engines import tiny_scheduler

CHUNK = 16
LONG_PROMPT = 200


def _request(
    rid: str, length: int, first: int, max_new_tokens: int, input_logprobs: bool = False
) -> TokenizedGenerateReq:
    ids = (np.arange(first, first + length, dtype=np.int32) % 250) + 3
    params = SamplingParams(temperature=0, max_new_tokens=max_new_tokens, ignore_eos=True)
    return TokenizedGenerateReq(
        rid, ids, params, return_logprob=input_logprobs, logprob_start_len=0 if input_logprobs else -1
    )


def _serve(model_dir: str, mixed: bool) -> tuple[dict[str, list], list[tuple[Any, int, int]]]:
    """Three streams decode, then a long prompt arrives. Returns every request's tokens and, for each
    step from the arrival until the long prompt's first token, ``(kind, prompt tokens, streams that
    got a token)``."""
    with tiny_scheduler(
        model_dir, chunked_prefill_size=64, enable_mixed_chunk=mixed, mixed_chunk_size=CHUNK
    ) as sched:
        tokens: dict[str, list] = {}

        def step() -> None:
            for out in sched.step():
                tokens.setdefault(out.rid, []).extend(out.new_token_ids.tolist())
                if out.input_token_logprobs:
                    tokens.setdefault("long-input-logprobs", []).extend(out.input_token_logprobs)

        for i in range(3):
            sched.handle(_request(f"short-{i}", 10 + i, 40 * i, 60))
        while len(sched.running) < 3:
            step()
        sched.handle(_request("long", LONG_PROMPT, 7, 8, input_logprobs=True))
        steps: list[tuple[Any, int, int]] = []
        schedule = sched._schedule

        def recording() -> Any:
            batch = schedule()
            if "long" in tokens or any(r.rid == "long" for r in sched.running):
                return batch
            if batch is not None:
                prompt = sum(r.extend_len for r in batch.reqs if r.rid == "long")
                steps.append((batch.kind, prompt, sum(r.rid != "long" for r in batch.reqs)))
            return batch

        sched._schedule = recording
        while sched.has_work():
            step()
        sched.check_kv_integrity()
        assert sched.stats()["kv_used"] == 0
        return tokens, steps


@pytest.fixture(scope="module")
def served(tiny_llama_dir) -> dict[bool, tuple[dict[str, list[int]], list[tuple[Any, int, int]]]]:
    return {mixed: _serve(tiny_llama_dir, mixed) for mixed in (False, True)}


def test_long_prompt_is_chunked_into_the_running_decodes(served):
    _, steps = served[True]
    assert len(steps) == -(-LONG_PROMPT // CHUNK)  # one chunk of at most CHUNK tokens a step
    assert all(kind is BatchKind.MIXED_CHUNK for kind, _, _ in steps)
    assert all(0 < prompt <= CHUNK for _, prompt, _ in steps)
    assert all(decodes == 3 for _, _, decodes in steps)  # every stream got a token every step


def test_prefill_first_stalls_the_streams_instead(served):
    _, steps = served[False]
    assert steps and all(kind is BatchKind.EXTEND and decodes == 0 for kind, _, decodes in steps)


def test_mixed_chunks_change_no_token(served):
    plain, _ = served[False]
    mixed, _ = served[True]
    plain_logprobs, mixed_logprobs = plain.pop("long-input-logprobs"), mixed.pop("long-input-logprobs")
    assert set(plain) == {"short-0", "short-1", "short-2", "long"}
    assert all(len(plain[r]) == (8 if r == "long" else 60) for r in plain)
    assert mixed == plain
    # the chunked prompt's input logprobs come out whole and equal (chunks of 16 vs 64 tokens)
    assert len(mixed_logprobs) == len(plain_logprobs) == LONG_PROMPT
    assert [t for _, t in mixed_logprobs] == [t for _, t in plain_logprobs]
    assert mixed_logprobs[0][0] is None
    assert max(abs(a - b) for (a, _), (b, _) in zip(mixed_logprobs[1:], plain_logprobs[1:])) < 1e-4
