"""The ``{text, output_ids, meta_info}`` response shared by the Engine and the HTTP server."""

from __future__ import annotations

import numpy as np

from radixlm.runtime.requests.response_builder import ResponseBuilder, public_finish_reason


def _progress(finish_reason=None, completion_tokens=1):
    return {
        "finish_reason": finish_reason,
        "prompt_tokens": 3,
        "completion_tokens": completion_tokens,
        "cached_tokens": 2,
    }


def test_snapshot_accumulates_logprobs_with_token_text():
    b = ResponseBuilder("r", prompt_tokens=3, token_text=lambda t: f"<{t}>", include_logprobs=True)
    b.update(
        "a",
        [5],
        _progress(),
        {
            "input_token_logprobs": [(None, 1), (-0.5, 2)],
            "output_token_logprobs": [(-0.1, 5)],
            "output_top_logprobs": [[(-0.1, 5), (-2.0, 6)]],
        },
        False,
    )
    b.update(
        "ab",
        np.asarray([5, 6], dtype=np.int32),
        _progress({"type": "length", "length": 2}, 2),
        {"output_token_logprobs": [(-0.2, 6)], "output_top_logprobs": [None]},
        True,
    )
    out = b.snapshot()
    assert out["text"] == "ab" and out["output_ids"] == [5, 6]
    meta = out["meta_info"]
    assert meta["id"] == "r" and meta["finish_reason"] == {"type": "length", "length": 2}
    assert (meta["prompt_tokens"], meta["completion_tokens"], meta["cached_tokens"]) == (3, 2, 2)
    assert meta["input_token_logprobs"] == [[None, 1, "<1>"], [-0.5, 2, "<2>"]]
    assert meta["output_token_logprobs"] == [[-0.1, 5, "<5>"], [-0.2, 6, "<6>"]]
    assert meta["output_top_logprobs"] == [[[-0.1, 5, "<5>"], [-2.0, 6, "<6>"]], None]
    assert meta["input_top_logprobs"] == [] and meta["e2e_latency"] >= 0 and b.finished


def test_logprob_fields_only_when_included_and_text_only_when_asked():
    b = ResponseBuilder("r", include_logprobs=False)
    b.update("x", [1], _progress(), {"output_token_logprobs": [(-0.1, 1)]}, False)
    assert "output_token_logprobs" not in b.snapshot()["meta_info"]
    assert b.logprobs["output_token_logprobs"] == [[-0.1, 1, None]]


def test_public_finish_reason_drops_the_status_code():
    assert public_finish_reason({"type": "abort", "message": "m", "status_code": 400}) == {
        "type": "abort",
        "message": "m",
    }
    assert public_finish_reason(None) is None
