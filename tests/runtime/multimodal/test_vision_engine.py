"""Images through a whole Engine: greedy tokens equal transformers' with chunks cutting through an
image; the radix cache shares a prefix through the same image and never through a different one; the
encoder runs once per image (its cache), batched across requests; text-only models refuse images."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.engines import make_engine
from tests.helpers.model_helpers import save_tiny_model, tiny_llama_config
from tests.helpers.vision_helpers import random_image, random_png, save_tiny_idefics3

PROMPT = "<|im_start|>user\nlook<image> at this<|im_end|>\n<|im_start|>assistant\n"
GREEDY = {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_idefics3(tmp_path_factory.mktemp("idefics3"))


@pytest.fixture(scope="module")
def engine(model_dir):
    eng = make_engine(
        str(model_dir), device="cpu", dtype="float32", num_threads=1, chunked_prefill_size=3, seed=0
    )
    yield eng
    eng.shutdown()


def hf_greedy(model_dir, text, images) -> list[int]:
    from transformers import AutoModelForImageTextToText, AutoProcessor

    proc = AutoProcessor.from_pretrained(str(model_dir))
    hf = AutoModelForImageTextToText.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    inputs = proc(text=[text], images=[images], return_tensors="pt")
    with torch.no_grad():
        out = hf.generate(**inputs, max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, inputs["input_ids"].shape[1] :].tolist()


def test_greedy_matches_transformers_with_chunks_through_images(engine, model_dir):
    text = "a<image>b<image>c"
    out = engine.generate(text, GREEDY, image_data=[random_png(1), random_png(2)], return_logprob=False)
    expected = hf_greedy(model_dir, text, [random_image(1), random_image(2)])
    assert out["output_ids"] == expected


def test_radix_cache_shares_only_through_the_same_image(engine):
    engine.flush_cache()
    cache = engine.scheduler.runner.encoder_cache
    first = engine.generate(PROMPT, GREEDY, image_data=random_png(5))
    misses = cache.misses
    again = engine.generate(PROMPT, GREEDY, image_data=random_png(5))
    other = engine.generate(PROMPT, GREEDY, image_data=random_png(6))
    _, mm = engine._images[0](PROMPT, [random_png(5)])
    assert again["output_ids"] == first["output_ids"]
    assert again["meta_info"]["cached_tokens"] > mm.positions[-1]  # through the image's tokens
    assert other["meta_info"]["cached_tokens"] <= mm.positions[0]  # up to the image, never into it
    assert cache.misses == misses + 1  # the repeat's image never re-encoded; the new one once


def test_encoder_batches_images_across_requests(model_dir):
    """Three requests prefilled in one step: their three images go through the tower in one call."""
    engine = make_engine(str(model_dir), device="cpu", dtype="float32", num_threads=1)
    calls = []
    model = engine.scheduler.runner.model
    original = model.encode_images
    model.encode_images = lambda pixels, mask=None: calls.append(pixels.shape[0]) or original(pixels, mask)
    try:
        outs = engine.generate([PROMPT] * 3, GREEDY, image_data=[random_png(s) for s in (10, 11, 12)])
        alone = engine.generate(PROMPT, GREEDY, image_data=random_png(11))
    finally:
        model.encode_images = original
        engine.shutdown()
    assert calls == [3]  # the repeat of image 11 was served from the encoder cache
    assert outs[1]["output_ids"] == alone["output_ids"]


def test_bad_images_are_rejected(engine, tmp_path):
    with pytest.raises(ValueError, match="2 image placeholders for 1 images"):
        engine.generate("<image><image>", GREEDY, image_data=random_png(1))
    with pytest.raises(ValueError, match="not a readable image"):
        engine.generate("<image>", GREEDY, image_data=b"not an image")
    with pytest.raises(ValueError, match="input logprobs"):
        engine.generate("<image>", GREEDY, image_data=random_png(1), return_logprob=True, logprob_start_len=0)
    with pytest.raises(ValueError, match="does not fetch image URLs"):
        engine.generate("<image>", GREEDY, image_data="http://example.com/cat.png")


def test_text_only_model_refuses_images(tmp_path):
    path = save_tiny_model(tiny_llama_config(), tmp_path / "llama")
    eng = make_engine(str(path), device="cpu", dtype="float32", num_threads=1)
    try:
        with pytest.raises(ValueError, match="text-only"):
            eng.generate("hi <image>", GREEDY, image_data=random_png(1))
    finally:
        eng.shutdown()
