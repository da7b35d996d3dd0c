"""SmolLM2-135M (the default model, from its GGUF) against transformers loading the same GGUF."""

from __future__ import annotations

import pytest
import torch

from radixlm.runtime.weights.model_registry import known_model_gguf
from tests.helpers.model_helpers import PagedSession, assert_logits_close, greedy_generate, make_runner

pytestmark = pytest.mark.real_model

QUESTIONS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three prime numbers and explain why they are prime.",
]


@pytest.fixture(scope="module")
def runner():
    return make_runner("smollm2-135m", context_length=2048)


@pytest.fixture(scope="module")
def hf():
    from transformers import AutoModelForCausalLM

    path = known_model_gguf("smollm2-135m")
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    return model.eval()


@pytest.fixture(scope="module")
def prompts(runner) -> list[list[int]]:
    tok = runner.loaded.tokenizer
    return [
        list(
            tok.apply_chat_template(
                [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True, return_dict=True
            )["input_ids"]
        )
        for q in QUESTIONS
    ]


@torch.no_grad()
def _ref(hf, tokens: list[int]) -> torch.Tensor:
    return hf(torch.tensor([tokens])).logits[0]


def test_loaded_model_metadata(runner) -> None:
    loaded = runner.loaded
    assert loaded.eos_token_ids == [2]
    assert "<|im_start|>" in loaded.chat_template and "SmolLM" in loaded.chat_template
    assert (loaded.num_layers, loaded.num_kv_heads, loaded.head_dim, loaded.vocab_size) == (30, 3, 64, 49152)
    assert loaded.hf_config["max_position_embeddings"] == 8192 and runner.context_length == 2048
    assert sum(p.numel() for p in runner.model.parameters()) == 134_515_008


def test_prefill_extend_and_decode_logits_match(runner, hf, prompts) -> None:
    seq = prompts[0] + [504, 3575, 282, 4649, 314, 7042, 30]
    full = _ref(hf, seq)
    s = PagedSession(runner)
    row = s.open()
    assert_logits_close(s.extend([row], [seq[:20]], all_logits=True)[0], full[:20])
    assert_logits_close(s.extend([row], [seq[20:-4]], all_logits=True)[0], full[20:-4])
    for i in range(len(seq) - 4, len(seq)):
        assert_logits_close(s.decode([row], [seq[i]])[0], full[i])
    other = s.share_prefix(row, 30)
    assert_logits_close(s.extend([other], [seq[30:]], all_logits=True)[0], full[30:])
    s.close(other)
    s.close(row)


def test_batch_extend_and_decode_logits_match(runner, hf, prompts) -> None:
    seqs = [prompts[0], prompts[1][:9], prompts[2]]
    fulls = [_ref(hf, seq) for seq in seqs]
    s = PagedSession(runner)
    rows = [s.open() for _ in seqs]
    s.extend([rows[2]], [seqs[2][:25]])  # one request already has a cached prefix
    starts = [0, 0, 25]
    outs = s.extend(rows, [seq[st:-1] for seq, st in zip(seqs, starts)], all_logits=True)
    for out, full, st in zip(outs, fulls, starts):
        assert_logits_close(out, full[st:-1])
    assert_logits_close(s.decode(rows, [seq[-1] for seq in seqs]), torch.stack([f[-1] for f in fulls]))
    for row in rows:
        s.close(row)


def test_greedy_32_tokens_identical_to_transformers_generate(runner, hf, prompts) -> None:
    ours = greedy_generate(runner, prompts, max_new_tokens=32)
    for prompt, out in zip(prompts, ours):
        ids = torch.tensor([prompt])
        # NOTE: an explicit mask; generate() would otherwise mask every <|im_end|> (= pad) in the prompt.
        ref = hf.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=32,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=2,
        )[0, len(prompt) :].tolist()
        assert out == ref
    assert runner.loaded.tokenizer.decode(ours[0]).startswith("The capital of France is Paris")
