"""The one prompt validator shared by the Engine and the HTTP server (no model needed)."""

from __future__ import annotations

import numpy as np
import pytest

from radixlm.runtime.messages import TokenizedGenerateReq
from radixlm.runtime.requests.request_validation import (
    InvalidRequest,
    ModelLimits,
    prompt_ids_array,
    validate_request,
)
from radixlm.runtime.sampling.sampling_params import SamplingParams

LIMITS = ModelLimits(vocab_size=100, context_length=8)


def _req(ids=(1, 2, 3), **fields) -> TokenizedGenerateReq:
    params = fields.pop("sampling_params", SamplingParams())
    return TokenizedGenerateReq("r", np.asarray(ids, dtype=np.int32), params, **fields)


def test_a_good_request_passes():
    validate_request(_req(return_logprob=True, logprob_start_len=2, top_logprobs_num=5), LIMITS)


@pytest.mark.parametrize(
    "req, fragment, param",
    [
        (_req(ids=()), "empty", None),
        (_req(ids=(1, 100)), "vocabulary", "input_ids"),
        (_req(ids=(-1, 2)), "vocabulary", "input_ids"),
        (_req(ids=range(8)), "context length", None),
        (_req(logprob_start_len=3), "logprob_start_len", "logprob_start_len"),
        (_req(top_logprobs_num=-1), "top_logprobs_num", "top_logprobs_num"),
        (_req(top_logprobs_num=101), "top_logprobs_num", "top_logprobs_num"),
        (_req(pin_children=-1), "pin_children", "pin_children"),
        (_req(pin_children=1, sampling_params=SamplingParams(n=2)), "n == 1", "pin_children"),
    ],
    ids=[
        "empty",
        "too_large_id",
        "negative_id",
        "context",
        "logprob_start_len",
        "negative_top",
        "huge_top",
        "negative_pins",
        "pins_with_n",
    ],
)
def test_each_problem_is_named(req, fragment, param):
    with pytest.raises(InvalidRequest, match=fragment) as e:
        validate_request(req, LIMITS)
    assert isinstance(e.value, ValueError) and e.value.param == param


def test_prompt_ids_array_rejects_ids_int32_cannot_hold():
    assert prompt_ids_array([1, 2], LIMITS).dtype == np.int32
    with pytest.raises(InvalidRequest, match="vocabulary"):
        prompt_ids_array([1, 2**40], LIMITS)


def test_limits_from_model_info():
    assert ModelLimits.from_model_info({"vocab_size": 7, "context_length": 9, "x": 1}) == ModelLimits(7, 9)
