"""DetokenizerManager: per-request state, cumulative text and ids, logprob deltas passed through."""

from __future__ import annotations

import numpy as np

from radixlm.runtime.detokenizer.manager import DetokenizerManager
from radixlm.runtime.messages import BatchTokenOut, ReqTokenOut


def token_out(rid: str, ids: list[int], finished: bool = False, reason=None, **kw) -> ReqTokenOut:
    return ReqTokenOut(
        rid,
        np.asarray(ids, dtype=np.int32),
        finished,
        reason,
        prompt_tokens=3,
        completion_tokens=kw.pop("completion_tokens", len(ids)),
        cached_tokens=0,
        **kw,
    )


def test_interleaved_requests_keep_separate_state(tokenizer):
    manager = DetokenizerManager(tokenizer)
    a, b = tokenizer.encode("Hello 😀 world"), tokenizer.encode("你好, stop here")
    texts = {"a": "", "b": ""}
    for i in range(max(len(a), len(b))):
        outs = []
        for rid, ids in (("a", a), ("b", b)):
            if i < len(ids):
                last = i == len(ids) - 1
                reason = {"type": "length", "length": len(ids)} if last else None
                outs.append(
                    token_out(rid, [ids[i]], last, reason, stop_strings=["stop"] if rid == "b" else [])
                )
        for out in manager.handle(BatchTokenOut(outs)).outs:
            assert out.text.startswith(texts[out.rid]) and "\ufffd" not in out.text
            texts[out.rid] = out.text
            if not out.finished:
                assert out.meta_info["finish_reason"] is None
    assert texts == {"a": "Hello 😀 world", "b": "你好, stop here"}
    assert manager.states == {}


def test_stop_cut_ids_kept_and_logprobs_passed(tokenizer):
    manager = DetokenizerManager(tokenizer)
    ids = tokenizer.encode("one two. three")
    logprobs = [(-0.5, ids[0]), (-0.1, ids[1])]
    first = manager.handle(
        BatchTokenOut([token_out("r", ids[:2], stop_strings=["."], output_token_logprobs=logprobs)])
    ).outs[0]
    assert first.meta_info["output_token_logprobs"] == [(-0.5, ids[0]), (-0.1, ids[1])]
    final = manager.handle(
        BatchTokenOut([token_out("r", ids[2:], True, {"type": "stop", "matched": "."}, stop_strings=["."])])
    ).outs[0]
    assert final.text == "one two" and final.finished
    assert final.output_ids.tolist() == ids and final.meta_info["finish_reason"]["matched"] == "."
    assert "output_token_logprobs" not in final.meta_info


def test_a_detokenizing_error_fails_only_that_request(tokenizer, monkeypatch):
    from radixlm.runtime.detokenizer import manager as manager_module

    feed = manager_module.IncrementalDetokenizer.feed
    poison = 10**6

    def failing_feed(self, ids):
        if poison in ids:
            raise RuntimeError("cannot decode")
        return feed(self, ids)

    monkeypatch.setattr(manager_module.IncrementalDetokenizer, "feed", failing_feed)
    manager = DetokenizerManager(tokenizer)
    ids = tokenizer.encode("fine text")
    bad = token_out("bad", [poison])
    outs = {o.rid: o for o in manager.handle(BatchTokenOut([bad, token_out("ok", ids)])).outs}
    assert outs["bad"].finished and outs["bad"].meta_info["finish_reason"]["status_code"] == 500
    assert "detokenizing failed" in outs["bad"].meta_info["finish_reason"]["message"]
    assert not outs["ok"].finished and outs["ok"].text == "fine text"
    assert "bad" not in manager.states
