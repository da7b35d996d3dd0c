"""GGUF LoRA files over HTTP: ``--lora-paths name=file.gguf`` at launch and ``/load_lora_adapter`` with a
file while serving give PEFT's greedy tokens; a bad file is a 400 naming it and the server keeps
serving."""

from __future__ import annotations

import json

import httpx
import pytest

from radixlm.runtime.server.launch import launch_server
from tests.helpers.gguf_lora_writer import save_gguf_lora
from tests.helpers.lora_helpers import PeftReference

PROMPT = [1, 72, 101, 108, 108, 111, 44, 32]


@pytest.fixture(scope="module")
def files(lora_base, adapters, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("gguf_lora_server")
    config = json.loads((lora_base / "config.json").read_text())
    wrong = save_gguf_lora(adapters["ko2"], config, root / "wrong.gguf", arch="qwen2")
    return {
        "all8": save_gguf_lora(adapters["all8"], config, root / "all8.gguf"),
        "ko2": save_gguf_lora(adapters["ko2"], config, root / "ko2.gguf"),
        "wrong": wrong,
    }


def _generate(url: str, lora: str | None) -> httpx.Response:
    body = {
        "input_ids": PROMPT,
        "sampling_params": {"temperature": 0, "max_new_tokens": 6, "ignore_eos": True},
        "lora_path": lora,
    }
    return httpx.post(url + "/generate", json=body, timeout=120)


def test_gguf_adapters_over_http(lora_base, adapters, files):
    with launch_server(
        model=str(lora_base),
        device="cpu",
        num_threads=1,
        kv_cache_gb=0.02,
        context_length=512,
        lora_paths=(f"all8={files['all8']}",),
        max_lora_rank=8,
    ) as server:
        url = server.url
        reply = _generate(url, "all8")
        assert reply.status_code == 200, reply.text
        assert reply.json()["output_ids"] == PeftReference(lora_base, adapters["all8"]).greedy(PROMPT, 6)

        loaded = httpx.post(
            url + "/load_lora_adapter", json={"lora_name": "ko2", "lora_path": str(files["ko2"])}
        )
        assert loaded.status_code == 200 and loaded.json()["success"], loaded.text
        reply = _generate(url, "ko2")
        assert reply.json()["output_ids"] == PeftReference(lora_base, adapters["ko2"]).greedy(PROMPT, 6)

        bad = httpx.post(
            url + "/load_lora_adapter", json={"lora_name": "wrong", "lora_path": str(files["wrong"])}
        )
        assert bad.status_code == 400 and "'wrong'" in bad.text and "architecture 'qwen2'" in bad.text
        base = httpx.post(url + "/load_lora_adapter", json={"lora_name": "base", "lora_path": str(lora_base)})
        assert base.status_code == 400 and "'base'" in base.text and "adapter_config.json" in base.text

        assert _generate(url, "all8").status_code == 200  # still serving
        models = httpx.get(url + "/v1/models").json()["data"]
        assert {m["id"] for m in models} >= {"all8", "ko2"} and "wrong" not in {m["id"] for m in models}
