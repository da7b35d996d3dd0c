"""Images over HTTP on a tiny random Idefics3: OpenAI ``image_url`` parts and ``/generate`` ``image_data``
give the same greedy tokens; files only under --allowed-local-media-path, no downloads, count and size
limits, all as clear 400s."""

from __future__ import annotations

import base64

import httpx
import pytest

from radixlm.runtime.server.launch import launch_server
from tests.helpers.vision_helpers import png_data_url, random_image, random_png, save_tiny_idefics3

GREEDY = {"temperature": 0, "max_new_tokens": 6, "ignore_eos": True}


def data_url(seed: int) -> str:
    return png_data_url(random_image(seed))


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    root = tmp_path_factory.mktemp("media")
    (root / "cat.png").write_bytes(random_png(3))
    (root.parent / "secret.png").write_bytes(random_png(3))
    return root


@pytest.fixture(scope="module")
def client(tmp_path_factory, media):
    model = save_tiny_idefics3(tmp_path_factory.mktemp("idefics3"))
    with launch_server(
        model=str(model),
        device="cpu",
        num_threads=1,
        kv_cache_gb=0.02,
        context_length=512,
        allowed_local_media_path=str(media),
        max_images_per_request=2,
        max_image_bytes=20000,
    ) as server:
        with httpx.Client(base_url=server.url, timeout=60) as c:
            yield c


def chat(client, parts: list[dict]) -> httpx.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": parts}], "temperature": 0, "max_tokens": 6}
    return client.post("/v1/chat/completions", json={**body, "ignore_eos": True})


def image_part(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


def test_chat_image_url_equals_generate_image_data(client):
    r = chat(client, [{"type": "text", "text": "what is"}, image_part(data_url(1))])
    assert r.status_code == 200, r.text
    prompt = "<|im_start|>user\nwhat is<image><|im_end|>\n<|im_start|>assistant\n"
    g = client.post("/generate", json={"text": prompt, "image_data": data_url(1), "sampling_params": GREEDY})
    assert g.status_code == 200, g.text
    assert r.json()["choices"][0]["message"]["content"] == g.json()["text"]
    assert r.json()["usage"]["prompt_tokens"] == g.json()["meta_info"]["prompt_tokens"]


def test_local_files_only_under_the_allowed_directory(client, media):
    assert chat(client, [image_part(str(media / "cat.png"))]).status_code == 200
    assert chat(client, [image_part(f"file://{media / 'cat.png'}")]).status_code == 200
    r = chat(client, [image_part(str(media / ".." / "secret.png"))])
    assert r.status_code == 400 and "outside the allowed directory" in r.text


@pytest.mark.parametrize(
    "parts, fragment",
    [
        ([image_part("http://example.com/cat.png")], "does not fetch image URLs"),
        ([image_part(data_url(1))] * 3, "at most 2"),
        ([image_part("data:image/png;base64," + base64.b64encode(b"x" * 21000).decode())], "larger than"),
        ([image_part("data:image/png;base64,@@@")], "data URL, base64"),
        ([image_part("data:image/png;base64," + base64.b64encode(b"not an image").decode())], "readable"),
        ([{"type": "image_url", "image_url": {}}], "image_url.url"),
        ([{"type": "input_audio", "input_audio": {}}], "content parts"),
    ],
)
def test_bad_images_are_clear_400s(client, parts, fragment):
    r = chat(client, parts)
    assert r.status_code == 400 and fragment in r.json()["error"]["message"], r.text
