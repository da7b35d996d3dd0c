"""LoRA over HTTP: ``lora_path`` on /generate, the OpenAI ``model`` naming an adapter, /v1/models,
loading and unloading adapters while requests stream, and bad adapters as 400s that leave the server
serving."""

from __future__ import annotations

import concurrent.futures

import httpx
import pytest

from radixlm.runtime.server.launch import launch_server
from tests.helpers.lora_helpers import PeftReference, save_peft_adapter
from tests.helpers.model_helpers import save_tiny_model, tiny_llama_config

PROMPT = [1, 72, 101, 108, 108, 111, 44, 32]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("lora_server")
    base = save_tiny_model(tiny_llama_config(), root / "base")
    a = save_peft_adapter(base, root / "a", rank=8, seed=1)
    b = save_peft_adapter(base, root / "b", rank=4, targets=["q_proj", "v_proj", "down_proj"], seed=2)
    return base, a, b


@pytest.fixture(scope="module")
def server(files):
    base, a, _ = files
    with launch_server(
        model=str(base),
        device="cpu",
        num_threads=1,
        kv_cache_gb=0.02,
        context_length=512,
        served_model_name="tiny",
        lora_paths=(f"a={a}",),
        max_lora_rank=8,
        debug_invariants=True,
    ) as handle:
        yield handle


def _generate(url: str, lora, n: int = 6, prompt=PROMPT) -> httpx.Response:
    body = {
        "input_ids": prompt,
        "sampling_params": {"temperature": 0, "max_new_tokens": n, "ignore_eos": True},
        "lora_path": lora,
    }
    return httpx.post(url + "/generate", json=body, timeout=120)


def test_generate_with_lora_path_matches_peft(server, files):
    base, a, _ = files
    reply = _generate(server.url, "a")
    assert reply.status_code == 200, reply.text
    assert reply.json()["output_ids"] == PeftReference(base, a).greedy(PROMPT, 6)
    batch = httpx.post(
        server.url + "/generate",
        json={
            "input_ids": [PROMPT, PROMPT],
            "sampling_params": {"temperature": 0, "max_new_tokens": 6, "ignore_eos": True},
            "lora_path": ["a", None],
        },
        timeout=120,
    ).json()
    assert batch[0]["output_ids"] == PeftReference(base, a).greedy(PROMPT, 6)
    assert batch[1]["output_ids"] == PeftReference(base, None).greedy(PROMPT, 6)


def test_unknown_adapter_is_a_400(server):
    reply = _generate(server.url, "nope")
    assert reply.status_code == 400 and "'nope' is not loaded" in reply.text
    reply = httpx.post(
        server.url + "/v1/completions", json={"model": "tiny:nope", "prompt": "Hi", "max_tokens": 2}
    )
    assert reply.status_code == 400 and "'nope' is not loaded" in reply.text


def test_openai_model_names_an_adapter_and_models_lists_it(server, files):
    base, a, _ = files
    ids = [c["id"] for c in httpx.get(server.url + "/v1/models").json()["data"]]
    assert ids == ["tiny", "a"]
    from transformers import AutoTokenizer

    want = AutoTokenizer.from_pretrained(str(base)).decode(
        PeftReference(base, a).greedy(PROMPT, 4), skip_special_tokens=True
    )
    texts = {}
    for model in ("a", "tiny:a", "tiny"):
        body = {"model": model, "prompt": PROMPT, "max_tokens": 4, "temperature": 0}
        reply = httpx.post(server.url + "/v1/completions", json=body, timeout=120)
        assert reply.status_code == 200, reply.text
        texts[model] = reply.json()["choices"][0]["text"]
    assert texts["a"] == texts["tiny:a"] == want != texts["tiny"]


def test_load_unload_while_streaming_and_bad_adapters(server, files, tmp_path):
    base, a, b = files
    url = server.url
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        running = [pool.submit(_generate, url, lora, 40) for lora in ("a", None, "a")]
        loaded = httpx.post(url + "/load_lora_adapter", json={"lora_name": "b", "lora_path": str(b)})
        assert loaded.status_code == 200, loaded.text
        assert loaded.json()["loaded_adapters"] == {"a": str(a), "b": str(b)}
        with_b = pool.submit(_generate, url, "b", 6)
        bad = httpx.post(url + "/load_lora_adapter", json={"lora_name": "bad", "lora_path": str(tmp_path)})
        assert bad.status_code == 400 and "'bad'" in bad.text and "adapter_config.json" in bad.text
        big = save_peft_adapter(base, tmp_path / "big", rank=16)
        too_big = httpx.post(url + "/load_lora_adapter", json={"lora_name": "big", "lora_path": str(big)})
        assert too_big.status_code == 400 and "rank 16 exceeds --max-lora-rank 8" in too_big.text
        gone = httpx.post(url + "/unload_lora_adapter", json={"lora_name": "a"})
        assert gone.status_code == 200 and gone.json()["loaded_adapters"] == {"b": str(b)}
        results = [f.result() for f in running]
        assert with_b.result().json()["output_ids"] == PeftReference(base, b).greedy(PROMPT, 6)
    assert [r.status_code for r in results] == [200, 200, 200]
    assert results[0].json()["output_ids"] == PeftReference(base, a).greedy(PROMPT, 40)
    assert _generate(url, "a").status_code == 400  # unloaded
    assert httpx.post(url + "/unload_lora_adapter", json={"lora_name": "a"}).status_code == 400
    reloaded = httpx.post(url + "/load_lora_adapter", json={"lora_name": "a", "lora_path": str(a)})
    assert reloaded.status_code == 200
    assert _generate(url, "a").json()["output_ids"] == PeftReference(base, a).greedy(PROMPT, 6)
