"""Gemma 3 with images through a whole Engine: greedy tokens equal transformers' with a chunk size that
would cut an image (no chunk does); the radix cache shares a prefix through the same image and never
through a different one; text-only requests stay on the causal path."""

from __future__ import annotations

import pytest
import torch

from radixlm.runtime.multimodal.image_spans import image_spans
from tests.helpers.engines import make_engine
from tests.helpers.gemma3_vision_helpers import BOI, save_tiny_gemma3_vision
from tests.helpers.vision_helpers import random_image, random_png

PROMPT = f"<|im_start|>user\nlook{BOI} at this<|im_end|>\n<|im_start|>assistant\n"
GREEDY = {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_gemma3_vision(tmp_path_factory.mktemp("gemma3v"))


@pytest.fixture(scope="module")
def engine(model_dir):
    eng = make_engine(
        str(model_dir), device="cpu", dtype="float32", num_threads=1, chunked_prefill_size=5, seed=0
    )
    yield eng
    eng.shutdown()


@pytest.fixture
def extends(engine):
    """``(prefix_len, extend_len, image_spans, batch_size)`` of the first request of every extend the
    runner runs."""
    runner = engine.scheduler.runner
    seen: list[tuple[int, int, list | None, int]] = []
    original = runner.forward

    def forward(fb):
        if not fb.is_decode:
            spans = None if fb.image_spans is None else fb.image_spans[0]
            seen.append((fb.extend_prefix_lens_cpu[0], fb.extend_seq_lens_cpu[0], spans, fb.batch_size))
        return original(fb)

    runner.forward = forward
    yield seen
    runner.forward = original


def hf_greedy(model_dir, text, images) -> list[int]:
    from transformers import AutoModelForImageTextToText, AutoProcessor

    proc = AutoProcessor.from_pretrained(str(model_dir))
    hf = AutoModelForImageTextToText.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    inputs = proc(text=[text], images=[images] if images else None, return_tensors="pt")
    with torch.no_grad():
        out = hf.generate(**inputs, max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, inputs["input_ids"].shape[1] :].tolist()


def test_greedy_matches_transformers_with_chunks_kept_off_images(engine, model_dir, extends):
    engine.flush_cache()
    text = f"a{BOI}b{BOI}c"
    out = engine.generate(text, GREEDY, image_data=[random_png(1), random_png(2)], return_logprob=False)
    assert out["output_ids"] == hf_greedy(model_dir, text, [random_image(1), random_image(2)])
    _, mm = engine._images[0](text, [random_png(1), random_png(2)])
    spans = image_spans(mm)
    for start, length, _, _ in extends:  # 5-token chunks: each 16-token image went in one piece
        assert not any(s < start + length < e for s, e in spans)
    assert [(s, e) for _, _, step, _ in extends if step for s, e in step] == spans


def test_radix_cache_shares_only_through_the_same_image(engine):
    engine.flush_cache()
    first = engine.generate(PROMPT, GREEDY, image_data=random_png(5))
    again = engine.generate(PROMPT, GREEDY, image_data=random_png(5))
    other = engine.generate(PROMPT, GREEDY, image_data=random_png(6))
    _, mm = engine._images[0](PROMPT, [random_png(5)])
    assert again["output_ids"] == first["output_ids"]
    assert again["meta_info"]["cached_tokens"] > mm.positions[-1]  # through the image's tokens
    assert other["meta_info"]["cached_tokens"] <= mm.positions[0]  # up to the image, never into it


def test_text_only_requests_stay_causal(engine, model_dir, extends):
    text = "<|im_start|>user\nno picture today<|im_end|>\n"
    out = engine.generate(text, GREEDY)
    assert out["output_ids"] == hf_greedy(model_dir, text, [])
    assert extends and all(spans is None for _, _, spans, _ in extends)


def test_an_image_chunk_beside_running_decodes(engine, extends):
    """Two text requests decode while the image prompt prefills: the mixed steps (prompt chunk, then
    the decodes as one planned decode) keep the image's attention both ways; its logprobs equal
    those of the prompt prefilled alone."""

    def logprobs(out):
        return torch.tensor([lp for lp, _, _ in out["meta_info"]["output_token_logprobs"]])

    engine.flush_cache()
    alone = engine.generate(PROMPT, GREEDY, image_data=random_png(7), return_logprob=True)
    engine.flush_cache()
    extends.clear()
    texts = [f"<|im_start|>user\nsay something long {i}<|im_end|>\n" for i in range(2)]
    long = {**GREEDY, "max_new_tokens": 40}
    outs = engine.generate(
        [*texts, PROMPT], [long, long, GREEDY], image_data=[None, None, random_png(7)], return_logprob=True
    )
    assert outs[2]["output_ids"] == alone["output_ids"]
    torch.testing.assert_close(logprobs(outs[2]), logprobs(alone), rtol=0, atol=1e-4)
    assert any(spans and size >= 3 for _, _, spans, size in extends)  # beside two decodes
