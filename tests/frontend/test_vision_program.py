"""``image(...)`` and ``video(...)`` in programs on a RuntimeEndpoint serving a tiny random Idefics3: the
program's generation equals /generate's with the same images; video frames are sampled evenly."""

from __future__ import annotations

import base64

import httpx
import pytest

import radixlm as sgl
from radixlm.frontend.media import sample_frames
from radixlm.runtime.server.launch import launch_server
from tests.helpers.vision_helpers import random_image, save_tiny_idefics3

GREEDY = {"temperature": 0, "max_new_tokens": 6, "ignore_eos": True}


@pytest.fixture(scope="module")
def frames(tmp_path_factory):
    root = tmp_path_factory.mktemp("frames")
    for i in range(5):
        random_image(20 + i).save(root / f"{i:03d}.png")
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    model = save_tiny_idefics3(tmp_path_factory.mktemp("idefics3"))
    with launch_server(
        model=str(model), device="cpu", num_threads=1, kv_cache_gb=0.02, context_length=512
    ) as s:
        yield s


def reference(server, text: str, paths: list) -> str:
    urls = ["data:image/png;base64," + base64.b64encode(p.read_bytes()).decode() for p in paths]
    body = {"text": text, "image_data": urls, "sampling_params": GREEDY}
    r = httpx.post(server.url + "/generate", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["text"]


def test_image_in_a_program_equals_generate(server, frames):
    @sgl.function
    def describe(s, picture):
        s += "look" + sgl.image(picture) + " at"
        s += sgl.gen("answer", max_tokens=6, temperature=0, ignore_eos=True)

    backend = sgl.RuntimeEndpoint(server.url)
    path = frames / "001.png"
    state = describe.run(picture=str(path), backend=backend)
    assert state["answer"] == reference(server, "look<image> at", [path])
    state = describe.run(picture=path.read_bytes(), backend=backend)  # bytes work as well
    assert state["answer"] == reference(server, "look<image> at", [path])


def test_video_frames_are_images(server, frames):
    @sgl.function
    def watch(s):
        s += "clip:" + sgl.video(str(frames), num_frames=2) + "?"
        s += sgl.gen("answer", max_tokens=6, temperature=0, ignore_eos=True)

    state = watch.run(backend=sgl.RuntimeEndpoint(server.url))
    picked = [frames / "001.png", frames / "003.png"]
    assert sample_frames(str(frames), 2) == [str(p) for p in picked]
    assert state["answer"] == reference(server, "clip:<image><image>?", picked)


def test_video_needs_frames(tmp_path):
    with pytest.raises(ValueError, match="no video decoder"):
        sgl.video(str(tmp_path / "clip.mp4"), num_frames=4)
