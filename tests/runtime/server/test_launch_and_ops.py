"""SGLang's launch line (``python -m radixlm.launch_server --model-path <hub id>`` from a fake HF cache,
offline, ``--chat-template chatml``) and the operations endpoints: ``/metrics`` (parsed with
prometheus_client; its counters move with traffic), ``/health_generate``, ``/get_load``,
``/v1/models/{id}``, ``/v1/tokenize``, ``/v1/detokenize``; ``stop_regex``, ``logit_bias``, the
OpenAI fields accepted without effect, ``flush_cache?empty_cache=true``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from radixlm.runtime.server.chat_template_names import BUILTIN_CHAT_TEMPLATES
from radixlm.runtime.server.launch import ServerHandle, free_port
from tests.helpers.waiting import wait_until

REVISION = "feedfacefeedfacefeedfacefeedfacefeedface"
HUB_ID = "test-org/tiny-llama"


@pytest.fixture(scope="module")
def server(tiny_llama_dir, tmp_path_factory):
    cache = tmp_path_factory.mktemp("hf") / "hub"
    repo = cache / "models--test-org--tiny-llama"
    shutil.copytree(tiny_llama_dir, repo / "snapshots" / REVISION)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="radixlm-launch-", suffix=".log", delete=False)
    cmd = [
        sys.executable,
        "-m",
        "radixlm.launch_server",
        "--model-path",
        HUB_ID,
        "--port",
        str(port),
        "--chat-template",
        "chatml",
        "--enable-metrics",
        "--device",
        "cpu",
        "--num-threads",
        "1",
        "--kv-cache-gb",
        "0.02",
        "--context-length",
        "512",
        "--debug-invariants",
    ]
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    handle = ServerHandle(process, f"http://127.0.0.1:{port}", log.name, None)

    def healthy() -> bool:
        if process.poll() is not None:
            raise RuntimeError("the server exited")
        try:
            return httpx.get(handle.url + "/health", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(healthy, 300, "the server to answer /health", interval=0.2)
    except (RuntimeError, TimeoutError) as e:
        handle.shutdown()
        raise RuntimeError(handle.log()[-4000:]) from e
    yield handle
    handle.shutdown()


@pytest.fixture()
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def test_launch_line_loads_the_hub_id_from_the_cache_with_a_named_template(client):
    info = client.get("/get_model_info").json()
    assert info["model_path"] == HUB_ID and info["local_model_path"].endswith(REVISION)
    assert info["chat_template"] == BUILTIN_CHAT_TEMPLATES["chatml"]


def _samples(client: httpx.Client) -> dict[str, float]:
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()) if k != "model_name")
            out[s.name + (f"{{{labels}}}" if labels else "")] = s.value
    return out


def test_metrics_parse_and_move_with_traffic(client):
    before = _samples(client)
    prompt = "The same long prefix for the cache. " * 3
    for _ in range(2):
        r = client.post(
            "/generate",
            json={
                "text": prompt,
                "sampling_params": {"max_new_tokens": 5, "temperature": 0, "ignore_eos": True},
            },
        )
        assert r.status_code == 200
    after = _samples(client)
    n_prompt = len(prompt.encode())  # the byte-level tokenizer: one token per byte

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    assert delta("radixlm:prompt_tokens_total") == 2 * n_prompt
    assert delta("radixlm:generation_tokens_total") == 10
    assert delta("radixlm:cached_tokens_total") >= n_prompt - 1  # the second request hit the cache
    assert delta("radixlm:num_requests_total{finish_reason=length}") == 2
    for hist in (
        "time_to_first_token_seconds",
        "time_per_output_token_seconds",
        "e2e_request_latency_seconds",
    ):
        assert delta(f"radixlm:{hist}_count") == 2
        assert delta(f"radixlm:{hist}_sum") > 0
    for gauge in ("num_running_reqs", "num_queue_reqs", "kv_usage", "kv_cache_usage", "cache_hit_rate"):
        assert f"radixlm:{gauge}" in after
    assert after["radixlm:num_running_reqs"] == 0 and after["radixlm:kv_cache_usage"] > 0
    assert 0 < after["radixlm:cache_hit_rate"] <= 1


def test_health_generate_load_and_model_card(client):
    assert client.get("/health_generate").status_code == 200
    load = client.get("/get_load").json()
    assert load == [{"dp_rank": 0, "num_reqs": 0, "num_waiting_reqs": 0, "num_tokens": 0}]
    card = client.get(f"/v1/models/{HUB_ID}")
    assert card.status_code == 200 and card.json()["id"] == HUB_ID and card.json()["object"] == "model"
    missing = client.get("/v1/models/other/model")
    assert missing.status_code == 404 and "does not exist" in missing.json()["error"]["message"]


def test_tokenize_and_detokenize_round_trip(client):
    one = client.post("/v1/tokenize", json={"prompt": "héllo", "add_special_tokens": False}).json()
    assert one["count"] == len(one["tokens"]) == len("héllo".encode()) and one["max_model_len"] == 512
    assert client.post("/v1/detokenize", json={"tokens": one["tokens"]}).json() == {"text": "héllo"}
    many = client.post("/tokenize", json={"prompt": ["a", "bc"], "add_special_tokens": False}).json()
    assert many["count"] == [1, 2]
    assert client.post("/detokenize", json={"tokens": many["tokens"]}).json() == {"text": ["a", "bc"]}
    bad = client.post("/v1/detokenize", json={"tokens": [10**9]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"
    assert client.post("/v1/tokenize", json={"prompt": 3}).status_code == 400


def test_stop_regex_on_the_native_api(client):
    params = {"max_new_tokens": 48, "temperature": 1.0, "seed": 5, "ignore_eos": True}
    full = client.post("/generate", json={"text": "abc", "sampling_params": params}).json()["text"]
    pos = next(
        i
        for i in range(2, len(full))
        if full[i].isascii() and full[i].isprintable() and full.find(full[i]) == i
    )
    out = client.post(
        "/generate",
        json={"text": "abc", "sampling_params": {**params, "stop_regex": "[" + re.escape(full[pos]) + "]"}},
    ).json()
    assert out["text"] == full[:pos]
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": full[pos]}
    bad = client.post("/generate", json={"text": "abc", "sampling_params": {"stop_regex": "("}})
    assert bad.status_code == 400 and "stop_regex" in bad.json()["error"]["message"]


def test_openai_logit_bias_and_accepted_fields(client):
    z = client.post("/v1/tokenize", json={"prompt": "Z", "add_special_tokens": False}).json()["tokens"][0]
    body = {
        "model": HUB_ID,
        "prompt": "abc",
        "max_tokens": 3,
        "temperature": 0,
        "ignore_eos": True,
        "logit_bias": {str(z): 100},
        "user": "u1",
        "metadata": {"k": "v"},
        "store": False,
        "service_tier": "auto",
    }
    out = client.post("/v1/completions", json=body)
    assert out.status_code == 200, out.text
    assert out.json()["choices"][0]["text"] == "ZZZ"
    chat = client.post(
        "/v1/chat/completions",
        json={
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 2,
            "parallel_tool_calls": True,
            "user": "u1",
            "metadata": {"k": "v"},
            "store": True,
            "service_tier": "default",
        },
    )
    assert chat.status_code == 200, chat.text
    for bias in ({"100": 500}, {"99999": 1}):
        r = client.post("/v1/completions", json={"prompt": "abc", "max_tokens": 1, "logit_bias": bias})
        assert r.status_code == 400 and r.json()["error"]["param"] == "logit_bias", r.text
    r = client.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}], "audio": {"voice": "alloy"}},
    )
    assert r.status_code == 400 and "audio" in r.json()["error"]["message"]


def test_flush_cache_accepts_empty_cache(client):
    assert client.post("/flush_cache?empty_cache=true").status_code == 200
    assert client.get("/get_server_info").json()["stats"]["kv_cached"] == 0
