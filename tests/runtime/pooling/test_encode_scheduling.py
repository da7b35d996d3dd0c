"""Embedding requests inside the scheduler: a decoder's sequences share prefill batches (with each other
and with generation prompts) and reuse the radix cache; an encoder batches queued requests; no KV
slot or row leaks. References: transformers / sentence-transformers on the same weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from radixlm.runtime.engine.engine import Engine
from radixlm.runtime.messages import EncodeOut, EncodeReq, FlushCacheReq, TokenizedGenerateReq
from radixlm.runtime.sampling.sampling_params import SamplingParams
from radixlm.runtime.scheduler.scheduler import Scheduler
from radixlm.runtime.server_args import ServerArgs
from tests.helpers.embedding_models import save_st_decoder, save_st_encoder, tiny_bert_config
from tests.helpers.model_helpers import tiny_qwen3_config

PREFIX = "embeddings are vectors that a search engine compares " * 4


def _cos(a, b) -> torch.Tensor:
    a, b = torch.as_tensor(a).float(), torch.as_tensor(b).float()
    return torch.nn.functional.cosine_similarity(a, b, dim=-1)


def test_a_shared_prefix_is_computed_once(tmp_path):
    torch.set_num_threads(1)
    path = save_st_decoder(tiny_qwen3_config(), tmp_path, "lasttoken", True)
    texts = [PREFIX + "the cat sat", PREFIX + "a dog runs fast"]
    from sentence_transformers import SentenceTransformer

    ref = SentenceTransformer(str(path), device="cpu").encode(texts, convert_to_tensor=True)
    with Engine(model=str(path), device="cpu", dtype="float32", num_threads=1, is_embedding=True) as engine:
        counters = engine.scheduler.counters
        lens = [len(engine.tokenizer.encode(t)) for t in texts]
        first = engine.encode(texts[0])
        computed_first = counters.num_prefill_tokens
        second = engine.encode(texts[1])
        computed_second = counters.num_prefill_tokens - computed_first
        assert computed_first == lens[0]
        assert computed_second < lens[1] // 2  # the long prefix came from the radix cache
        assert (_cos([first, second], ref) >= 0.9999).all()
        again = engine.encode(texts[1])  # all cached: only the last token is computed
        assert counters.num_prefill_tokens - computed_first - computed_second == 1
        assert _cos(again, second).item() >= 0.99999
        engine.check_kv_integrity()


def test_mean_pooling_recomputes_every_token(tmp_path):
    """Mean pooling reads every token's state, which the KV cache does not keep: no prefix reuse."""
    torch.set_num_threads(1)
    path = save_st_decoder(tiny_qwen3_config(), tmp_path, "mean", False)
    with Engine(model=str(path), device="cpu", dtype="float32", num_threads=1, is_embedding=True) as engine:
        counters = engine.scheduler.counters
        n = len(engine.tokenizer.encode(PREFIX + "x"))
        first = engine.encode(PREFIX + "x")
        second = engine.encode(PREFIX + "x")
        assert counters.num_prefill_tokens == 2 * n
        torch.testing.assert_close(torch.tensor(first), torch.tensor(second))


def _scheduler(path) -> Scheduler:
    args = ServerArgs(
        model=str(path),
        device="cpu",
        dtype="float32",
        num_threads=1,
        max_total_tokens=2048,
        context_length=256,
        is_embedding=True,
    )
    return Scheduler(args)


def _generate(rid: str, ids: list[int]) -> TokenizedGenerateReq:
    params = SamplingParams(max_new_tokens=4, temperature=0)
    return TokenizedGenerateReq(rid, np.array(ids, dtype=np.int32), params)


def _run(sched: Scheduler, msgs: list) -> tuple[dict[str, list[int]], dict[str, EncodeOut], list[int]]:
    """Handle ``msgs`` together, step until idle; the generated tokens, the encode answers, and the
    prefill tokens of each step."""
    for msg in msgs:
        assert sched.handle(msg) is None
    tokens: dict[str, list[int]] = {}
    replies: dict[str, EncodeOut] = {}
    per_step = []
    while sched.has_work():
        before = sched.counters.num_prefill_tokens
        for out in sched.step():
            tokens.setdefault(out.rid, []).extend(int(t) for t in out.new_token_ids)
        per_step.append(sched.counters.num_prefill_tokens - before)
        replies.update({r.rid: r for r in sched.take_replies()})
    return tokens, replies, per_step


def _assert_no_leak(sched: Scheduler) -> None:
    sched.check_kv_integrity()
    assert sched.cache.tree.protected_size() == 0
    assert sched.handle(FlushCacheReq()).success
    assert sched.cache.allocator.available_size() == sched.cache.capacity  # every slot back
    rows = sched.runner.req_to_token_pool
    assert rows.available_size() == rows.size  # every row back


@pytest.fixture(scope="module")
def causal_dir(tmp_path_factory):
    from tests.helpers.model_helpers import save_tiny_model

    return save_tiny_model(tiny_qwen3_config(), tmp_path_factory.mktemp("causal"))


def test_embedding_and_generation_share_a_prefill_step(causal_dir):
    torch.set_num_threads(1)
    from transformers import AutoModelForCausalLM

    prompt, emb_ids = [5, 17, 42, 8, 99, 3], [[7, 8, 9, 10, 11, 12, 13], [200, 201, 202]]
    sched = _scheduler(causal_dir)
    try:
        alone_tokens, _, _ = _run(sched, [_generate("g", prompt)])
        _, alone_replies, _ = _run(sched, [EncodeReq("e", "embed", emb_ids)])
        _assert_no_leak(sched)
        tokens, replies, per_step = _run(sched, [_generate("g", prompt), EncodeReq("e", "embed", emb_ids)])
        assert per_step[0] == len(prompt) + sum(map(len, emb_ids))  # one extend held all three
        assert tokens["g"] == alone_tokens["g"]
        together = torch.tensor(replies["e"].vectors)
        torch.testing.assert_close(together, torch.tensor(alone_replies["e"].vectors))
        _assert_no_leak(sched)
    finally:
        sched.shutdown()
    model = AutoModelForCausalLM.from_pretrained(str(causal_dir), dtype=torch.float32)
    for ids, ours in zip(emb_ids, replies["e"].vectors, strict=True):
        with torch.no_grad():
            last = model.model(torch.tensor([ids])).last_hidden_state[0, -1]
        assert _cos(ours, last).item() >= 0.9999


def test_several_embedding_requests_batch_and_answer_in_order(causal_dir):
    torch.set_num_threads(1)
    sched = _scheduler(causal_dir)
    try:
        msgs = [EncodeReq(f"e{i}", "embed", [[10 + i, 20 + i, 30 + i, 40 + i]]) for i in range(4)]
        msgs.insert(2, EncodeReq("bad", "embed", [[1, 2]], dimensions=4))  # refused: not Matryoshka
        for msg in msgs:
            sched.handle(msg)
        sched.step()
        order = [r.rid for r in sched.take_replies()]
        assert order == ["e0", "e1", "bad", "e2", "e3"]  # one step computed them all, in arrival order
        alone = [_run(sched, [msg])[1][msg.rid].vectors for msg in msgs if msg.rid != "bad"]
        _, together, _ = _run(sched, [m for m in msgs if m.rid != "bad"])
        for i, vectors in enumerate(alone):
            torch.testing.assert_close(torch.tensor(together[f"e{i}"].vectors), torch.tensor(vectors))
        _assert_no_leak(sched)
    finally:
        sched.shutdown()


def test_encoder_requests_batch_into_one_forward(tmp_path):
    torch.set_num_threads(1)
    path = save_st_encoder(tiny_bert_config(), tmp_path, "mean", True)
    sched = _scheduler(path)
    calls = []
    model = sched.runner.model
    original = model.forward
    model.forward = lambda *a: calls.append(a[0].shape) or original(*a)  # counts the padded forwards
    try:
        msgs = [EncodeReq(f"e{i}", "embed", [[2] + [7 + i] * (3 + 2 * i) + [3]]) for i in range(3)]
        alone = {m.rid: _run(sched, [m])[1][m.rid].vectors for m in msgs}
        calls.clear()
        _, together, _ = _run(sched, msgs)
        assert len(calls) == 1 and calls[0][0] == 3  # one forward over the three sequences
        for rid, vectors in alone.items():
            torch.testing.assert_close(torch.tensor(together[rid].vectors), torch.tensor(vectors))
    finally:
        sched.shutdown()
