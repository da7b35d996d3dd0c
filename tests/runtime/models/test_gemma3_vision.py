"""Gemma 3 with images against transformers on a tiny random checkpoint: logits and greedy tokens with
one and two images, an image at the prompt's start and mid-conversation, prefill in chunks that keep
each image whole; causal attention over an image is caught; both attention backends' extend paths."""

from __future__ import annotations

import pytest
import torch

from radixlm.runtime.executor.forward_batch import ForwardMode
from radixlm.runtime.multimodal.encoder_cache import EncoderCache
from radixlm.runtime.multimodal.encoder_stage import chunk_rows, encode_images
from radixlm.runtime.multimodal.image_spans import chunk_end, image_spans, spans_in
from radixlm.runtime.multimodal.processor import ImagePromptProcessor
from tests.helpers.gemma3_vision_helpers import BOI, save_tiny_gemma3_vision
from tests.helpers.model_helpers import PagedSession, assert_logits_close, make_runner
from tests.helpers.vision_helpers import random_image

PROMPTS = {
    "start": (f"{BOI}what is this?", [0]),
    "two": (f"a{BOI} and {BOI} compare", [1, 2]),
    "mid": (
        "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\nhi<|im_end|>\n<|im_start|>user\n"
        f"look: {BOI}<|im_end|>\n",
        [3],
    ),
}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from transformers import AutoModelForImageTextToText

    path = save_tiny_gemma3_vision(tmp_path_factory.mktemp("gemma3v"))
    runner = make_runner(path)
    hf = AutoModelForImageTextToText.from_pretrained(str(path), dtype=torch.float32).eval()
    return path, runner, hf, ImagePromptProcessor.from_model_dir(str(path))


def ours(
    runner,
    proc,
    text,
    images,
    chunk: int | None = None,
    steps: int = 0,
    both_ways: bool = True,
    whole: bool = True,
):
    """All prompt logits (prefill in chunks of about ``chunk``, moved off the images as the scheduler
    does unless not ``whole``), then ``steps`` greedy tokens; ``both_ways=False`` attends causally
    over the images."""
    ids, mm = proc(text, images)
    spans = image_spans(mm)
    encoded = encode_images(runner.model, EncoderCache(1 << 20), mm.items)
    s = PagedSession(runner)
    row = s.open()
    logits = []
    start = 0
    while start < len(ids):
        end = min(start + (chunk or len(ids)), len(ids))
        end = chunk_end(spans, start, end) if whole else end
        offsets, rows = chunk_rows(mm, start, end, encoded)
        fb = s._build(ForwardMode.EXTEND, [row], [ids[start:end]], True)
        if offsets:
            fb.mm_positions, fb.mm_embeds = torch.tensor(offsets), torch.stack(rows)
            fb.image_spans = [spans_in(spans, start, end)] if both_ways else None
        logits.append(runner.forward(fb))
        start = end
    out = []
    tok = int(logits[-1][-1].argmax())
    for _ in range(steps):
        out.append(tok)
        tok = int(s.decode([row], [tok])[0].argmax())
    s.close(row)
    return torch.cat(logits), out


def reference(hf, proc, text, images, steps: int = 8):
    inputs = proc.processor(text=[text], images=[images], return_tensors="pt")
    with torch.no_grad():
        logits = hf(**inputs).logits[0]
        gen = hf.generate(
            **inputs,
            max_new_tokens=steps,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
            min_new_tokens=steps,
        )[0, inputs["input_ids"].shape[1] :].tolist()
    return logits, gen


@pytest.mark.parametrize("case", sorted(PROMPTS))
def test_logits_and_greedy_match_transformers(setup, case):
    _, runner, hf, proc = setup
    text, seeds = PROMPTS[case]
    images = [random_image(s, (30 + 7 * s, 50 - 5 * s)) for s in seeds]
    ref, gen = reference(hf, proc, text, images)
    logits, tokens = ours(runner, proc, text, images, steps=8)
    assert_logits_close(logits, ref)
    assert tokens == gen
    chunked, _ = ours(runner, proc, text, images, chunk=5)  # 5-token chunks, each image whole
    assert_logits_close(chunked, ref)


def test_causal_or_cut_image_attention_is_caught(setup):
    """The check above fails when the image tokens attend causally (transformers' are both ways), or
    when a chunk ends inside an image (its first tokens never see the rest)."""
    _, runner, hf, proc = setup
    text, seeds = PROMPTS["two"]
    images = [random_image(s) for s in seeds]
    ref, _ = reference(hf, proc, text, images, steps=1)
    causal, _ = ours(runner, proc, text, images, both_ways=False)
    cut, _ = ours(runner, proc, text, images, chunk=5, whole=False)
    for logits in (causal, cut):
        with pytest.raises(AssertionError, match="max abs diff"):
            assert_logits_close(logits, ref)


@pytest.mark.parametrize(
    "options",
    [{"attention_backend": "triton"}, {"enable_deterministic_inference": True}],
    ids=["triton", "det"],
)
def test_other_extend_paths_attend_both_ways(setup, options):
    """The Triton backend's extend is causal: a batch with image spans takes the torch path (so the
    Triton interpreter is not needed here); deterministic inference's per-position extend unmasks the
    span itself."""
    path, _, hf, _ = setup
    runner = make_runner(path, **options)
    proc = ImagePromptProcessor.from_model_dir(str(path))
    text, seeds = PROMPTS["start"]
    images = [random_image(s) for s in seeds]
    ref, _ = reference(hf, proc, text, images, steps=1)
    logits, _ = ours(runner, proc, text, images)
    assert_logits_close(logits, ref)


def test_tower_refuses_other_image_sizes(setup):
    _, runner, _, _ = setup
    with pytest.raises(ValueError, match="32 px square images"):
        runner.model.encode_images(torch.zeros(1, 3, 40, 40))


def test_model_info_names_the_placeholder(setup):
    _, runner, _, _ = setup
    info = runner.model_info()
    assert info["is_multimodal"] and info["image_token"] == BOI
