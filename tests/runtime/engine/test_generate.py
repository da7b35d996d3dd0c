"""The in-process Engine on a tiny random model: the generation API users rely on."""

from __future__ import annotations

import threading

import pytest

GREEDY = {"temperature": 0, "max_new_tokens": 12}


def test_single_prompt_returns_text_ids_and_meta(tiny_engine):
    out = tiny_engine.generate("Hello world", {**GREEDY, "ignore_eos": True})
    meta = out["meta_info"]
    assert len(out["output_ids"]) == 12
    assert meta["completion_tokens"] == 12
    assert meta["prompt_tokens"] == len(tiny_engine.tokenizer.encode("Hello world", add_special_tokens=False))
    assert meta["finish_reason"] == {"type": "length", "length": 12}
    # A generation that ends inside a multi-byte character drops the incomplete bytes.
    full = tiny_engine.tokenizer.decode(out["output_ids"], skip_special_tokens=True)
    assert out["text"] == full.rstrip("\ufffd")


def test_batch_of_prompts_keeps_order(tiny_engine):
    prompts = ["alpha", "beta beta", "gamma gamma gamma"]
    outs = tiny_engine.generate(prompts, GREEDY)
    singles = [tiny_engine.generate(p, GREEDY) for p in prompts]
    assert [o["output_ids"] for o in outs] == [s["output_ids"] for s in singles]


def test_input_ids_and_text_prompts_agree(tiny_engine):
    ids = tiny_engine.tokenizer.encode("same prompt", add_special_tokens=False)
    a = tiny_engine.generate("same prompt", GREEDY)
    b = tiny_engine.generate(input_ids=ids, sampling_params=GREEDY)
    assert a["output_ids"] == b["output_ids"]


def test_shared_prefix_is_served_from_cache(tiny_engine):
    prefix = "A long shared instruction that many requests repeat. " * 3
    tiny_engine.generate(prefix + "Q1", GREEDY)
    out = tiny_engine.generate(prefix + "Q2", GREEDY)
    assert out["meta_info"]["cached_tokens"] >= len(prefix) - 1


def test_streaming_chunks_grow_to_final_text(tiny_engine):
    chunks = list(tiny_engine.generate("stream me", {"temperature": 0, "max_new_tokens": 10}, stream=True))
    full = tiny_engine.generate("stream me", {"temperature": 0, "max_new_tokens": 10})
    texts = [c["text"] for c in chunks]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:]))
    assert texts[-1] == full["text"]
    assert chunks[-1]["meta_info"]["finish_reason"] is not None


def test_stop_string_cuts_text_before_it(tiny_engine):
    params = {"temperature": 0, "max_new_tokens": 24}
    for i in range(20):
        prompt = f"stop test {i}"
        text = tiny_engine.generate(prompt, params)["text"]
        stop = next((c for c in text[3:] if c.isascii() and c.isalnum()), None)
        if stop is not None:
            break
    else:
        pytest.fail("the tiny model produced no ASCII character to stop on")
    out = tiny_engine.generate(prompt, {**params, "stop": stop})
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert out["text"] == text[: text.index(stop)]


def test_stop_token_id_finishes_with_that_token(tiny_engine):
    base = tiny_engine.generate("token stop", GREEDY)
    target = base["output_ids"][5]
    first = base["output_ids"].index(target)
    out = tiny_engine.generate("token stop", {**GREEDY, "stop_token_ids": [target]})
    assert out["output_ids"] == base["output_ids"][: first + 1]
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": target}


def test_min_new_tokens_delays_a_stop_token(tiny_engine):
    base = tiny_engine.generate("eos", GREEDY)
    target = base["output_ids"][0]  # greedy would stop at once on this token
    early = tiny_engine.generate("eos", {**GREEDY, "stop_token_ids": [target]})
    assert early["output_ids"] == [target]
    delayed = tiny_engine.generate("eos", {**GREEDY, "stop_token_ids": [target], "min_new_tokens": 4})
    assert len(delayed["output_ids"]) >= 4
    assert target not in delayed["output_ids"][:4]
    reason = delayed["meta_info"]["finish_reason"]
    assert reason["type"] == "length" or (
        reason == {"type": "stop", "matched": target} and delayed["output_ids"][-1] == target
    )


def test_ignore_eos_generates_max_new_tokens(tiny_engine):
    eos = tiny_engine.model_info()["eos_token_ids"][0]
    out = tiny_engine.generate(
        "eos", {**GREEDY, "stop_token_ids": [], "ignore_eos": True, "max_new_tokens": 40}
    )
    assert len(out["output_ids"]) == 40
    assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 40}
    stopped = tiny_engine.generate("eos", {**GREEDY, "max_new_tokens": 40})
    if eos in out["output_ids"]:  # the same greedy path, without ignore_eos, ends at that EOS
        assert stopped["output_ids"] == out["output_ids"][: out["output_ids"].index(eos) + 1]


def test_n_parallel_samples_share_the_prompt(tiny_engine):
    prompt = "parallel samples of one long enough prompt, computed once and shared"
    outs = tiny_engine.generate(prompt, {"temperature": 1.0, "max_new_tokens": 8, "n": 3, "seed": 7})
    assert isinstance(outs, list) and len(outs) == 3
    assert len({tuple(o["output_ids"]) for o in outs}) > 1
    assert max(o["meta_info"]["cached_tokens"] for o in outs) > 0


def test_output_and_input_logprobs(tiny_engine):
    out = tiny_engine.generate(
        "logprob check",
        GREEDY,
        return_logprob=True,
        logprob_start_len=0,
        top_logprobs_num=3,
        return_text_in_logprobs=True,
    )
    meta = out["meta_info"]
    n_in = meta["prompt_tokens"]
    assert len(meta["input_token_logprobs"]) == n_in
    assert meta["input_token_logprobs"][0][0] is None
    assert all(lp <= 0 for lp, _, _ in meta["input_token_logprobs"][1:])
    assert [e[1] for e in meta["output_token_logprobs"]] == out["output_ids"]
    for (lp, tid, _), top in zip(meta["output_token_logprobs"], meta["output_top_logprobs"]):
        assert len(top) == 3
        assert top[0][1] == tid  # greedy picks the most likely token
        assert abs(top[0][0] - lp) < 1e-5


def test_prefill_only_request_scores_the_prompt(tiny_engine):
    ids = tiny_engine.tokenizer.encode("score these tokens", add_special_tokens=False)
    out = tiny_engine.generate(
        input_ids=ids, sampling_params={"max_new_tokens": 0}, return_logprob=True, logprob_start_len=3
    )
    meta = out["meta_info"]
    assert out["output_ids"] == []
    assert [e[1] for e in meta["input_token_logprobs"]] == ids[3:]
    full = tiny_engine.generate(
        input_ids=ids, sampling_params={"max_new_tokens": 0}, return_logprob=True, logprob_start_len=0
    )
    tail = full["meta_info"]["input_token_logprobs"][3:]
    for (a, _, _), (b, _, _) in zip(meta["input_token_logprobs"], tail):
        assert abs(a - b) < 1e-4


def test_concurrent_threads_are_served(tiny_engine):
    results: dict[int, list[int]] = {}

    def worker(i: int) -> None:
        results[i] = tiny_engine.generate(f"thread {i}", GREEDY)["output_ids"]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == list(range(8))
    assert results[3] == tiny_engine.generate("thread 3", GREEDY)["output_ids"]


def test_flush_cache_empties_the_tree(tiny_engine):
    tiny_engine.generate("to be flushed", GREEDY)
    assert tiny_engine.flush_cache() is True
    info = tiny_engine.get_server_info()
    assert info["kv_cached"] == 0 and info["kv_free"] == info["kv_total"]


def test_async_generate(tiny_engine):
    import asyncio

    async def main():
        return await asyncio.gather(*(tiny_engine.async_generate(f"async {i}", GREEDY) for i in range(4)))

    outs = asyncio.run(main())
    assert [o["output_ids"] for o in outs] == [
        tiny_engine.generate(f"async {i}", GREEDY)["output_ids"] for i in range(4)
    ]
