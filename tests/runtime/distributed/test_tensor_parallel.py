"""Tensor parallelism on CPU with gloo: tp_size=2 generates what tp_size=1 does (greedy text, logprobs
within tolerance) on tiny random Llama/Qwen2 models with 1 and 2 KV heads, through chunked prefill,
radix reuse and retraction, with every KV slot accounted for; rank processes exit with the engine."""

from __future__ import annotations

import os

import pytest

from radixlm.runtime.engine import Engine, EngineError
from tests.helpers.engines import make_engine
from tests.helpers.model_helpers import save_tiny_model, tiny_llama_config, tiny_qwen2_config
from tests.helpers.waiting import wait_until

CONFIGS = {
    "llama-kv1": lambda: tiny_llama_config(num_key_value_heads=1),
    "llama-kv2-tied": lambda: tiny_llama_config(num_key_value_heads=2, tie_word_embeddings=True),
    "qwen2-kv2": lambda: tiny_qwen2_config(num_key_value_heads=2),
}
PROMPTS = [
    "The quick brown fox jumps over",
    "A shared system prompt, then user one",
    "A shared system prompt, then user two",
    "x" * 90,
]
GREEDY = {"max_new_tokens": 24, "temperature": 0, "ignore_eos": True}
# Small pools and chunks: prompts are split across steps and requests are retracted.
PRESSURE = dict(max_total_tokens=160, chunked_prefill_size=32, max_running_requests=8)


def _pids_alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
            alive.append(pid)
        except ProcessLookupError:
            pass
    return alive


def _wait_gone(pids: list[int], timeout_s: float = 30.0) -> None:
    wait_until(
        lambda: not _pids_alive(pids), timeout_s, lambda: f"rank processes {_pids_alive(pids)} to exit"
    )


def _worker_pids(engine: Engine) -> list[int]:
    return [r["pid"] for r in engine.get_server_info()["tp_ranks"][1:]]


@pytest.fixture(scope="module", params=list(CONFIGS))
def model_dir(request, tmp_path_factory) -> str:
    return str(save_tiny_model(CONFIGS[request.param](), tmp_path_factory.mktemp(request.param)))


def _run(engine: Engine) -> list[dict]:
    out = engine.generate(PROMPTS, GREEDY, return_logprob=True)
    # Radix reuse: the same prompts again hit the cache on every rank.
    again = engine.generate(PROMPTS, GREEDY)
    assert [o["output_ids"] for o in again] == [o["output_ids"] for o in out]
    return out


def test_tp2_matches_tp1_under_chunking_reuse_and_retraction(model_dir: str) -> None:
    with make_engine(model_dir, device="cpu", **PRESSURE) as single:
        expected = _run(single)
    engine = make_engine(model_dir, device="cpu", tp_size=2, **PRESSURE)
    try:
        got = _run(engine)
        info = engine.get_server_info()
        assert info["num_retractions"] > 0, "the pool was meant to force a retraction"
        assert [o["output_ids"] for o in got] == [o["output_ids"] for o in expected]
        for a, b in zip(got, expected):
            lp_a = [t[0] for t in a["meta_info"]["output_token_logprobs"]]
            lp_b = [t[0] for t in b["meta_info"]["output_token_logprobs"]]
            assert lp_a == pytest.approx(lp_b, abs=1e-4)
        engine.check_kv_integrity()
        assert [r["alive"] for r in info["tp_ranks"]] == [True, True]
        workers = _worker_pids(engine)
    finally:
        engine.shutdown()
    _wait_gone(workers)


def test_killed_rank_fails_the_engine_and_leaves_no_process(tiny_llama_dir: str) -> None:
    engine = Engine(model=tiny_llama_dir, device="cpu", tp_size=2, kv_cache_gb=0.02)
    try:
        workers = _worker_pids(engine)
        os.kill(workers[0], 9)
        _wait_gone(workers)
        with pytest.raises((EngineError, RuntimeError)):
            engine.generate("hello", {"max_new_tokens": 4})
    finally:
        engine.shutdown()


def test_bad_tp_size_is_named(tiny_llama_dir: str) -> None:
    # 4 query heads do not split over 3 ranks: the start fails naming the cause, no rank survives.
    with pytest.raises(Exception, match="tp_size|divisible|exited"):
        Engine(model=tiny_llama_dir, device="cpu", tp_size=3, kv_cache_gb=0.02)
    with pytest.raises(ValueError, match="tp_size"):
        Engine(model=tiny_llama_dir, tp_size=0)


def test_server_with_a_killed_rank_goes_down_cleanly(tiny_llama_dir: str) -> None:
    import requests

    from radixlm.runtime.server.launch import launch_server

    server = launch_server(tiny_llama_dir, device="cpu", tp_size=2, kv_cache_gb=0.02)
    try:
        ok = requests.post(
            f"{server.url}/generate",
            json={"text": "hi", "sampling_params": {"max_new_tokens": 4, "temperature": 0}},
            timeout=120,
        )
        assert ok.status_code == 200
        ranks = requests.get(f"{server.url}/get_server_info", timeout=30).json()["tp_ranks"]
        assert [r["tp_rank"] for r in ranks] == [0, 1]
        pids = [r["pid"] for r in ranks]
        os.kill(pids[1], 9)
        server.process.wait(timeout=60)  # the server stops by itself
        _wait_gone(pids)
    finally:
        server.shutdown()


@pytest.mark.real_model
def test_default_model_tp3_matches_tp1(real_model_dir: str) -> None:
    # SmolLM2-135M has 9 query heads and 3 KV heads: 3 ranks is the smallest split that divides them
    # (tp_size=2 is refused, naming the head count). Float weights, so tp 3 must equal tp 1 to fp32
    # noise; its own Q4_1 blocks (int8 activations: near ties resolve either way) are checked in
    # test_tensor_parallel_quantized.py.
    prompts = ["The capital of France is", "def fibonacci(n):"]
    params = {"max_new_tokens": 16, "temperature": 0}
    with make_engine(real_model_dir, device="cpu", quantization="none") as single:
        expected = single.generate(prompts, params, return_logprob=True)
    with make_engine(real_model_dir, device="cpu", quantization="none", tp_size=3) as engine:
        got = engine.generate(prompts, params, return_logprob=True)
        engine.check_kv_integrity()
    assert [g["text"] for g in got] == [e["text"] for e in expected]
    for a, b in zip(got, expected):
        lp_a = [t[0] for t in a["meta_info"]["output_token_logprobs"]]
        lp_b = [t[0] for t in b["meta_info"]["output_token_logprobs"]]
        assert lp_a == pytest.approx(lp_b, abs=1e-3)
    with pytest.raises(Exception, match="num_attention_heads"):
        make_engine(real_model_dir, device="cpu", tp_size=2)
