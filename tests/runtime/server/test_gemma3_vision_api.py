"""Gemma 3 images over HTTP: an OpenAI ``image_url`` part becomes ``<start_of_image>`` in the templated
prompt and gives transformers' greedy tokens, as ``/generate`` with ``image_data`` does."""

from __future__ import annotations

import httpx
import torch

from radixlm.runtime.server.launch import launch_server
from tests.helpers.gemma3_vision_helpers import BOI, save_tiny_gemma3_vision
from tests.helpers.vision_helpers import png_data_url, random_image

STEPS = 6


def data_url(seed: int) -> str:
    return png_data_url(random_image(seed))


def hf_greedy_text(model_dir, text: str, seed: int) -> str:
    from transformers import AutoModelForImageTextToText, AutoProcessor

    proc = AutoProcessor.from_pretrained(str(model_dir))
    hf = AutoModelForImageTextToText.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    inputs = proc(text=[text], images=[[random_image(seed)]], return_tensors="pt")
    with torch.no_grad():
        out = hf.generate(**inputs, max_new_tokens=STEPS, do_sample=False, eos_token_id=None, pad_token_id=0)
    return proc.tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)


def test_chat_image_url_and_generate_image_data_equal_transformers(tmp_path):
    model = save_tiny_gemma3_vision(tmp_path / "gemma3v")
    prompt = f"<|im_start|>user\nwhat is{BOI}<|im_end|>\n<|im_start|>assistant\n"
    expected = hf_greedy_text(model, prompt, 1)
    with launch_server(
        model=str(model), device="cpu", num_threads=1, kv_cache_gb=0.02, context_length=512
    ) as server:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            parts = [
                {"type": "text", "text": "what is"},
                {"type": "image_url", "image_url": {"url": data_url(1)}},
            ]
            body = {"model": "m", "messages": [{"role": "user", "content": parts}], "temperature": 0}
            r = client.post("/v1/chat/completions", json={**body, "max_tokens": STEPS, "ignore_eos": True})
            params = {"temperature": 0, "max_new_tokens": STEPS, "ignore_eos": True}
            g = client.post(
                "/generate", json={"text": prompt, "image_data": data_url(1), "sampling_params": params}
            )
    assert r.status_code == 200, r.text
    assert g.status_code == 200, g.text
    assert expected and g.json()["text"] == expected
    assert r.json()["choices"][0]["message"]["content"] == expected
