"""The Engine on the embedded SmolLM2-135M: it answers, it shares prefixes, it matches our model runner."""

from __future__ import annotations

import pytest

from tests.helpers.engines import make_engine
from tests.helpers.model_helpers import greedy_generate, make_runner

pytestmark = pytest.mark.real_model

FEW_SHOT = (
    "Answer each question with one word.\n"
    "Q: What colour is the sky on a clear day? A: Blue\n"
    "Q: What do bees make? A: Honey\n"
    "Q: What is frozen water called? A: Ice\n"
)


# The file's blocks dequantized to fp32: served from its Q4_1 blocks this 135M model answers the chat
# question below in French, as llama.cpp does on the same file ("L'Étoile, la Cité, ..."); the
# quantized path is checked against llama.cpp in benchmarks/peers.
@pytest.fixture(scope="module")
def real_engine(real_model_dir):
    engine = make_engine(real_model_dir, kv_cache_gb=0.2, max_running_requests=64, quantization="none")
    yield engine
    engine.shutdown()


def chat(engine, user: str) -> str:
    return engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True
    )


def test_capital_of_france_is_paris(real_engine):
    """As a chat question and as a plain completion. (The chat turn "The capital of France is" makes
    this 135M model ramble in French, in transformers too, so the chat prompt asks a question.)"""
    greedy = {"temperature": 0, "max_new_tokens": 16}
    answer = real_engine.generate(chat(real_engine, "What is the capital of France?"), greedy)
    assert "Paris" in answer["text"], answer["text"]
    assert answer["meta_info"]["finish_reason"] == {"type": "stop", "matched": 2}  # <|im_end|>
    completion = real_engine.generate("The capital of France is", greedy)
    assert "Paris" in completion["text"], completion["text"]


def test_shared_prefix_batch_reports_cache_hits(real_engine):
    real_engine.flush_cache()
    prompts = [f"{FEW_SHOT}Q: What is {i} plus {i + 1}? A:" for i in range(64)]
    prefix_len = len(real_engine.tokenizer.encode(FEW_SHOT, add_special_tokens=False))
    before = real_engine.get_server_info()
    outs = real_engine.generate(prompts, {"temperature": 0, "max_new_tokens": 2})
    info = real_engine.get_server_info()
    cached = [o["meta_info"]["cached_tokens"] for o in outs]
    assert sum(c >= prefix_len - 1 for c in cached) >= 63, cached  # the prefix is computed once
    requested = info["cache_requested_tokens"] - before["cache_requested_tokens"]
    hits = info["cache_hit_tokens"] - before["cache_hit_tokens"]
    assert requested > 0 and hits / requested > 0.6
    assert 0 < info["cache_hit_rate"] <= 1


def test_greedy_equals_the_model_runner_loop(real_engine, real_model_dir):
    prompts = ["The quick brown fox", "def fibonacci(n):", "Once upon a time, in a small village,"]
    ids = [real_engine.tokenizer.encode(p, add_special_tokens=False) for p in prompts]
    outs = real_engine.generate(
        input_ids=ids, sampling_params={"temperature": 0, "max_new_tokens": 16, "ignore_eos": True}
    )
    runner = make_runner(real_model_dir, max_total_tokens=512, context_length=256)
    expected = greedy_generate(runner, ids, 16)
    assert [o["output_ids"] for o in outs] == expected


def test_greedy_alone_equals_greedy_in_a_batch_of_16(real_engine):
    """Batch shape changes the float summation order; on a real model that must not flip a token."""
    greedy = {"temperature": 0, "max_new_tokens": 12, "ignore_eos": True}
    prompts = [f"Write a sentence about the number {i}." for i in range(16)]
    alone = [real_engine.generate(prompts[i], greedy)["output_ids"] for i in (0, 5, 10, 15)]
    real_engine.flush_cache()
    batch = real_engine.generate(prompts, greedy)
    assert [batch[i]["output_ids"] for i in (0, 5, 10, 15)] == alone
