"""The default model served from its own Q4_1 blocks (our kernel, activations as int8 blocks) against
the same blocks dequantized to fp32 (``quantization="none"``, which matches transformers exactly).

Tolerance: int8 activation blocks (what llama.cpp does too) move SmolLM2's logits by up to ~6% of
their largest magnitude on these prompts on the AVX-512 machines we measured (2.7-5.7%; the kernel
is deterministic), and by 8.4% on an AVX2-only one (one prefill row of 41, row 19: 3.16 of a largest
logit of 37.6; every other row under 6%; the kernel's loops give the same bits on both instruction
sets, so where the machines differ is not established); we allow 10%. Greedy text is therefore not
identical everywhere: along the fp32 model's greedy continuations of the parity prompts
(``tests/runtime/models/test_smollm2.py``, ``tests/runtime/engine/test_real_model.py``), 6 of 192
positions picked another token (measured), each where fp32's own top two were within 0.25 logits.
The test demands that: the same choice wherever fp32 is not nearly tied (margin >= 0.5 logits), at
most 10% near-tie flips, and the user-visible answers unchanged where they are not near ties
themselves. "What is the capital of France?" is one: its first token is a 0.08-logit tie in fp32
("The" over "L"), and llama.cpp on the same Q4_1 file answers "L'Étoile, la Cité, ..."; the answer
asked for in one sentence has a clear margin at every token.
"""

from __future__ import annotations

import pytest

from radixlm.kernels.cpu.build import unavailable_reason
from tests.helpers.model_helpers import PagedSession, assert_logits_close, greedy_generate, make_runner

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.skipif(unavailable_reason() is not None, reason="no GGUF CPU kernels here"),
]
QUESTIONS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three prime numbers and explain why they are prime.",
]
COMPLETIONS = ["The quick brown fox", "def fibonacci(n):", "Once upon a time, in a small village,"]
CLEAR_QUESTION = "What is the capital of France? Answer in one sentence."


@pytest.fixture(scope="module")
def runners():
    native = make_runner("smollm2-135m", quantization="auto", context_length=1024, num_threads=2)
    dequantized = make_runner("smollm2-135m", context_length=1024, num_threads=2)
    return native, dequantized


@pytest.fixture(scope="module")
def chat_prompts(runners) -> list[list[int]]:
    tok = runners[1].loaded.tokenizer
    return [
        list(
            tok.apply_chat_template(
                [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True, return_dict=True
            )["input_ids"]
        )
        for q in QUESTIONS
    ]


def test_default_model_is_served_from_its_q4_1_blocks(runners) -> None:
    native, _ = runners
    assert native.quantization == "q4_1"


def test_logits_match_the_dequantized_blocks(runners, chat_prompts) -> None:
    native, dequantized = runners
    seq = chat_prompts[0] + [504, 3575, 282, 4649, 314, 7042, 30]
    outs = []
    for runner in (native, dequantized):
        s = PagedSession(runner)
        row = s.open()
        logits = [s.extend([row], [seq[:-3]], all_logits=True)[0]]
        logits += [s.decode([row], [t])[0] for t in seq[-3:]]
        s.close(row)
        outs.append(logits)
    for ours, ref in zip(*outs):
        assert_logits_close(ours, ref, rtol=0.10)


def _teacher_forced(runner, prompt: list[int], continuation: list[int]):
    s = PagedSession(runner)
    row = s.open()
    logits = s.extend([row], [prompt + continuation[:-1]], all_logits=True)[0][len(prompt) - 1 :]
    s.close(row)
    return logits


def test_greedy_choices_differ_only_on_near_ties(runners, chat_prompts) -> None:
    native, dequantized = runners
    tok = dequantized.loaded.tokenizer
    prompts = chat_prompts + [tok.encode(p, add_special_tokens=False) for p in COMPLETIONS]
    reference = greedy_generate(dequantized, prompts, 32)
    flips = 0
    for prompt, continuation in zip(prompts, reference):
        ours = _teacher_forced(native, prompt, continuation).argmax(-1)
        ref_logits = _teacher_forced(dequantized, prompt, continuation)
        assert ref_logits.argmax(-1).tolist() == continuation
        for i in (ours != ref_logits.argmax(-1)).nonzero().flatten().tolist():
            margin = (ref_logits[i, continuation[i]] - ref_logits[i, ours[i]]).item()
            assert margin < 0.5, f"a clear fp32 choice flipped (margin {margin:.3f} logits) at {i}"
            flips += 1
    assert flips <= 0.1 * 32 * len(prompts)
    clear = list(
        tok.apply_chat_template(
            [{"role": "user", "content": CLEAR_QUESTION}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=True,
        )["input_ids"]
    )
    answers = greedy_generate(native, [clear, prompts[-1]], 12)
    assert tok.decode(answers[0]).startswith("The capital of France is Paris.")
    assert answers[1] == reference[-1][:12]


def test_perplexity_of_the_blocks_within_one_percent_of_fp32(runners) -> None:
    """Teacher-forced over 512 tokens of docs/architecture.md, the Q4_1 blocks' perplexity is within 1%
    of the same blocks dequantized (``benchmarks/quality/block_perplexity.py`` runs every block
    format over 2048 tokens; measured 0.9996 for these blocks there)."""
    from benchmarks.quality.block_perplexity import perplexity, text_ids

    ids = text_ids(512)
    native, dequantized = runners
    ratio = perplexity(native, ids) / perplexity(dequantized, ids)
    assert abs(ratio - 1) < 0.01, ratio
