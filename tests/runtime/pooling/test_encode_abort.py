"""Aborting embedding requests in the scheduler: a decoder's queued sequences leave the queue, one
mid-prefill (chunked) is reaped before its next chunk, an encoder's queued job is dropped; every KV
slot and row comes back, and the next request is answered as if nothing had happened."""

from __future__ import annotations

import pytest
import torch

from radixlm.runtime.messages import CLIENT_ABORT_STATUS, AbortReq, EncodeOut, EncodeReq, FlushCacheReq
from radixlm.runtime.scheduler.scheduler import Scheduler
from tests.helpers.embedding_models import save_st_decoder, save_st_encoder, tiny_bert_config
from tests.helpers.engines import tiny_scheduler
from tests.helpers.model_helpers import tiny_qwen3_config

ARGS = dict(is_embedding=True, context_length=256, chunked_prefill_size=16, max_prefill_tokens=16)


def _until_idle(sched: Scheduler, max_steps: int = 500) -> dict[str, EncodeOut]:
    replies: dict[str, EncodeOut] = {}
    for _ in range(max_steps):
        sched.step()
        replies.update({r.rid: r for r in sched.take_replies()})
        if not sched.has_work():
            return replies
    raise AssertionError("the scheduler did not go idle")


def _assert_all_back(sched: Scheduler) -> None:
    sched.check_kv_integrity()
    assert sched.cache.tree.protected_size() == 0
    assert sched.stats()["kv_used"] == 0
    assert sched.handle(FlushCacheReq()).success
    assert sched.cache.allocator.available_size() == sched.cache.capacity
    rows = sched.runner.req_to_token_pool
    assert rows.available_size() == rows.size


@pytest.fixture(scope="module")
def decoder_dir(tmp_path_factory) -> str:
    return str(save_st_decoder(tiny_qwen3_config(), tmp_path_factory.mktemp("emb"), "lasttoken", True))


def test_abort_queued_and_mid_prefill_decoder_jobs(decoder_dir):
    torch.set_num_threads(1)
    long_ids = [[(7 * i) % 200 + 3 for i in range(100)]]  # 7 chunks of 16 tokens
    queued_ids = [[50 + i, 60 + i, 70 + i] for i in range(4)]
    after = EncodeReq("after", "embed", [[9, 8, 7, 6, 5]])
    with tiny_scheduler(decoder_dir, **ARGS) as sched:
        alone = _until_idle_with(sched, after)
        assert sched.handle(FlushCacheReq()).success
        sched.handle(EncodeReq("long", "embed", long_ids))
        sched.handle(EncodeReq("queued", "embed", queued_ids))
        sched.step()
        assert sched.chunked is not None and sched.chunked.rid == "long#0"  # mid-prefill, holding KV
        assert sched.cache.allocator.available_size() < sched.cache.capacity
        assert sum(r.group_rid == "queued" for r in sched.waiting) == 4  # nothing of it admitted yet
        sched.handle(AbortReq("queued"))
        assert not any(r.group_rid == "queued" for r in sched.waiting)
        sched.handle(AbortReq("long"))
        replies = _until_idle(sched)
        for rid in ("long", "queued"):
            assert replies[rid].error == "aborted" and replies[rid].status == CLIENT_ABORT_STATUS
        assert sched.counters.num_prefill_tokens < 2 * 16 + len(after.input_ids[0])  # no chunk after it
        assert sched.stats()["num_encode_aborted"] == 2 and sched.stats()["num_encode_jobs"] == 0
        assert len(sched.requests) == 0
        _assert_all_back(sched)
        again = _until_idle_with(sched, after)
        torch.testing.assert_close(torch.tensor(again.vectors), torch.tensor(alone.vectors))
        _assert_all_back(sched)


def _until_idle_with(sched: Scheduler, msg: EncodeReq) -> EncodeOut:
    sched.handle(msg)
    reply = _until_idle(sched)[msg.rid]
    assert not reply.error, reply.error
    return reply


def test_abort_a_queued_encoder_job(tmp_path):
    torch.set_num_threads(1)
    path = save_st_encoder(tiny_bert_config(), tmp_path, "mean", True)
    with tiny_scheduler(str(path), is_embedding=True, context_length=256) as sched:
        sched.handle(EncodeReq("gone", "embed", [[2, 7, 8, 3]]))
        sched.handle(EncodeReq("kept", "embed", [[2, 9, 9, 3]]))
        sched.handle(AbortReq("gone"))
        sched.handle(AbortReq("no-such-rid"))  # ignored
        replies = _until_idle(sched)
        assert replies["gone"].error == "aborted" and replies["gone"].status == CLIENT_ABORT_STATUS
        assert not replies["kept"].error and len(replies["kept"].vectors) == 1
        assert sched.stats()["num_encode_aborted"] == 1
