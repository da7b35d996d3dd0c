"""A server with both tiers: /metrics and get_server_info report hits, bytes and load time per tier;
a restarted server answers the first request of a known prompt from disk."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from radixlm.runtime.server.launch import launch_server

CONTEXTS = [f"context {i}: " + " ".join(f"{i}-{j}" for j in range(40))[:180] for i in range(4)]


def _launch(model: str, storage: str):
    return launch_server(
        model,
        device="cpu",
        num_threads=1,
        max_total_tokens=420,
        context_length=512,
        enable_metrics=True,
        enable_hierarchical_cache=True,
        hicache_storage_dir=storage,
        debug_invariants=True,
    )


def _generate(url: str, text: str) -> dict:
    body = {"text": text, "sampling_params": {"max_new_tokens": 4, "temperature": 0}}
    r = httpx.post(url + "/generate", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def _tier_samples(url: str) -> dict[str, float]:
    out = {}
    for family in text_string_to_metric_families(httpx.get(url + "/metrics").text):
        for s in family.samples:
            if s.name.startswith("radixlm:kv_tier_"):
                out[f"{s.name}:{s.labels['tier']}"] = s.value
    return out


def test_tier_metrics_and_restart(tiny_llama_dir, tmp_path):
    with _launch(tiny_llama_dir, str(tmp_path)) as server:
        for turn in range(2):
            for context in CONTEXTS:
                _generate(server.url, context + f" turn {turn}")
        stats = httpx.get(server.url + "/get_server_info").json()["stats"]
        samples = _tier_samples(server.url)
    assert stats["host_hit_tokens"] > 0 and stats["host_loaded_bytes"] > 0 and stats["host_load_seconds"] > 0
    assert samples["radixlm:kv_tier_hit_tokens:host"] == stats["host_hit_tokens"]
    assert samples["radixlm:kv_tier_written_bytes:disk"] > 0
    with _launch(tiny_llama_dir, str(tmp_path)) as server:
        out = _generate(server.url, CONTEXTS[0] + " after the restart")
        samples = _tier_samples(server.url)
    assert out["meta_info"]["cached_tokens"] >= 128
    assert samples["radixlm:kv_tier_hit_tokens:disk"] == out["meta_info"]["cached_tokens"]
