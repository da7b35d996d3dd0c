"""Idefics3 (SmolVLM) against transformers on a tiny random checkpoint: logits and greedy tokens with one
and two images, an image at the prompt's start and mid-conversation, prefill cut through an image."""

from __future__ import annotations

import pytest
import torch

from radixlm.runtime.multimodal.processor import ImagePromptProcessor
from tests.helpers.model_helpers import assert_logits_close, make_runner
from tests.helpers.vision_helpers import random_image, run_prompt, save_tiny_idefics3

PROMPTS = {
    "start": ("<image>what is this?", [0]),
    "two": ("a<image> and <image> compare", [1, 2]),
    "mid": (
        "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\nhi<|im_end|>\n<|im_start|>user\n"
        "look: <image><|im_end|>\n",
        [3],
    ),
}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from transformers import AutoModelForImageTextToText

    path = save_tiny_idefics3(tmp_path_factory.mktemp("idefics3"))
    runner = make_runner(path)
    hf = AutoModelForImageTextToText.from_pretrained(str(path), dtype=torch.float32).eval()
    return path, runner, hf, ImagePromptProcessor.from_model_dir(str(path))


@pytest.mark.parametrize("case", sorted(PROMPTS))
def test_logits_and_greedy_match_transformers(setup, case):
    path, runner, hf, proc = setup
    text, seeds = PROMPTS[case]
    images = [random_image(s, (30 + 7 * s, 50 - 5 * s)) for s in seeds]
    inputs = proc.processor(text=[text], images=[images], return_tensors="pt")
    with torch.no_grad():
        ref = hf(**inputs).logits[0]
        gen = hf.generate(
            **inputs, max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0, min_new_tokens=8
        )[0, inputs["input_ids"].shape[1] :].tolist()
    logits, tokens = run_prompt(runner, proc, text, images, steps=8)
    assert_logits_close(logits, ref)
    assert tokens == gen
    chunked, _ = run_prompt(runner, proc, text, images, chunk=3)  # chunks cut through the image's 4 tokens
    assert_logits_close(chunked, ref)


def test_pads_follow_the_image(setup):
    _, runner, _, proc = setup
    a, b, c = (
        mm.padded(ids, runner.vocab_size)
        for ids, mm in (proc("x<image>y", [random_image(s)]) for s in (7, 7, 8))
    )
    assert a == b and a != c
    assert all(t >= runner.vocab_size for t in set(a) - set(c))


def test_context_beyond_the_language_models_positions_is_warned(setup, caplog):
    """A vision-language config keeps the LM's limits in ``text_config``: they are read from there."""
    path = setup[0]
    with caplog.at_level("WARNING", logger="radixlm.runtime.executor.model_runner"):
        make_runner(path, context_length=1024)
    assert "context_length 1024 exceeds the model's max positions 512" in caplog.text
