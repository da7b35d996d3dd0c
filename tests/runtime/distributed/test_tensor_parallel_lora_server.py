"""LoRA over HTTP under tensor parallelism (tp_size=2 on CPU, gloo): a GGUF LoRA file loaded at launch
and a PEFT directory loaded while serving give PEFT's greedy tokens, a bad adapter is a 400 naming it
on every rank and the server keeps serving, an unloaded adapter is a 400. One server for the module."""

from __future__ import annotations

import json

import httpx
import pytest

from radixlm.runtime.server.launch import launch_server
from tests.helpers.gguf_lora_writer import save_gguf_lora
from tests.helpers.lora_helpers import PeftReference, save_peft_adapter
from tests.helpers.model_helpers import save_tiny_model, tiny_llama_config

PROMPT = [1, 72, 101, 108, 108, 111, 44, 32]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("tp_lora_server")
    base = save_tiny_model(tiny_llama_config(num_key_value_heads=2), root / "base")
    all8 = save_peft_adapter(base, root / "all8", rank=8, alpha=16.0, seed=1)
    config = json.loads((base / "config.json").read_text())
    return {
        "base": base,
        "all8": all8,
        "all8.gguf": save_gguf_lora(all8, config, root / "all8.gguf"),
        "mlp4": save_peft_adapter(base, root / "mlp4", rank=4, targets=["gate_proj", "down_proj"], seed=5),
    }


def _generate(url: str, lora: str | None) -> httpx.Response:
    body = {
        "input_ids": PROMPT,
        "sampling_params": {"temperature": 0, "max_new_tokens": 6, "ignore_eos": True},
        "lora_path": lora,
    }
    return httpx.post(url + "/generate", json=body, timeout=120)


def test_adapters_over_http_under_tp2(files):
    base = files["base"]
    with launch_server(
        model=str(base),
        device="cpu",
        num_threads=1,
        kv_cache_gb=0.02,
        context_length=512,
        tp_size=2,
        lora_paths=(f"all8={files['all8.gguf']}",),
        max_lora_rank=8,
    ) as server:
        url = server.url
        reply = _generate(url, "all8")
        assert reply.status_code == 200, reply.text
        assert reply.json()["output_ids"] == PeftReference(base, files["all8"]).greedy(PROMPT, 6)

        loaded = httpx.post(
            url + "/load_lora_adapter", json={"lora_name": "mlp4", "lora_path": str(files["mlp4"])}
        )
        assert loaded.status_code == 200 and loaded.json()["success"], loaded.text
        assert _generate(url, "mlp4").json()["output_ids"] == PeftReference(base, files["mlp4"]).greedy(
            PROMPT, 6
        )

        bad = httpx.post(url + "/load_lora_adapter", json={"lora_name": "bad", "lora_path": str(base)})
        assert bad.status_code == 400 and "'bad'" in bad.text and "adapter_config.json" in bad.text
        assert httpx.post(url + "/unload_lora_adapter", json={"lora_name": "all8"}).status_code == 200
        gone = _generate(url, "all8")
        assert gone.status_code == 400 and "'all8'" in gone.text
        assert _generate(url, None).json()["output_ids"] == PeftReference(base, None).greedy(PROMPT, 6)
        assert _generate(url, "mlp4").status_code == 200  # still serving
        models = {m["id"] for m in httpx.get(url + "/v1/models").json()["data"]}
        assert "mlp4" in models and not models & {"all8", "bad"}
        ranks = httpx.get(url + "/get_server_info").json()["tp_ranks"]
        assert [r["alive"] for r in ranks] == [True, True]
