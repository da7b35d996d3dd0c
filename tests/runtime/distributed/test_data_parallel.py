"""Data parallelism in one server (``dp_size=2``): requests sharing a prefix land on one replica, a
program's children follow their parent, each replica returns every KV slot; the routing policy's
rules on their own."""

from __future__ import annotations

import pytest
import requests

from radixlm.runtime.router.dp_controller import merge_stats
from radixlm.runtime.router.policy import RoutingPolicy
from radixlm.runtime.server.launch import launch_server

GREEDY = {"max_new_tokens": 4, "temperature": 0}
SYSTEM_A = "You are a helpful assistant for the accounting team. " * 3
SYSTEM_B = "Tu es un assistant qui répond en français, brièvement. " * 3


@pytest.fixture(scope="module")
def dp_server(tiny_llama_dir):
    server = launch_server(
        tiny_llama_dir, device="cpu", dp_size=2, kv_cache_gb=0.02, debug_invariants=True, enable_metrics=True
    )
    yield server
    server.shutdown()


def _generate(url: str, text: str, **extra) -> dict:
    reply = requests.post(
        f"{url}/generate", json={"text": text, "sampling_params": GREEDY, **extra}, timeout=120
    )
    assert reply.status_code == 200, reply.text
    return reply.json()


def _replicas(url: str) -> list[dict]:
    return requests.get(f"{url}/get_server_info", timeout=30).json()["dp_replicas"]


def test_shared_prefixes_land_on_one_replica_each(dp_server) -> None:
    before = [r["routed"] for r in _replicas(dp_server.url)]
    for user in range(4):
        _generate(dp_server.url, SYSTEM_A + f"question {user}?")
    after_a = [r["routed"] for r in _replicas(dp_server.url)]
    grew = [a - b for a, b in zip(after_a, before)]
    assert sorted(grew) == [0, 4], f"tenant A's requests were split: {grew}"
    for user in range(4):
        _generate(dp_server.url, SYSTEM_B + f"question {user}?")
    after_b = [r["routed"] for r in _replicas(dp_server.url)]
    grew_b = [a - b for a, b in zip(after_b, after_a)]
    assert sorted(grew_b) == [0, 4] and grew_b != grew, "tenant B should go to the other replica"
    replicas = _replicas(dp_server.url)
    for r in replicas:  # every replica's pool is accounted for on its own
        assert r["kv_used"] == 0 and r["kv_free"] + r["kv_cached"] == r["kv_total"], r


def test_metrics_show_each_replica(dp_server) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    _generate(dp_server.url, SYSTEM_A + "metrics?")
    text = requests.get(f"{dp_server.url}/metrics", timeout=30).text
    routed = {
        s.labels["dp_rank"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "radixlm:replica_routed_requests"
    }
    assert set(routed) == {"0", "1"}
    assert sum(routed.values()) == sum(r["routed"] for r in _replicas(dp_server.url))
    assert "radixlm:replica_kv_usage" in text and "radixlm:replica_cache_hit_rate" in text


def test_children_follow_their_parent(dp_server) -> None:
    # pins are the server's own (a client's /generate may not set them): a /program's forks carry them
    gen = {"type": "gen", "name": "x", "options": GREEDY}
    nodes = [{"id": 0, "parent": None, "extend": [{"text": "Story: once upon a time"}], "op": gen}]
    nodes += [
        {"id": i, "parent": 0, "extend": [{"text": f"{i}" * (20 + 13 * i)}], "op": {**gen, "name": f"c{i}"}}
        for i in (1, 2, 3)
    ]
    before = [r["routed"] for r in _replicas(dp_server.url)]
    graph = {"version": 1, "name": "dp-pins", "nodes": nodes}
    reply = requests.post(f"{dp_server.url}/program", json={"graph": graph}, timeout=120)
    assert reply.status_code == 200, reply.text
    grew = [a - b for a, b in zip([r["routed"] for r in _replicas(dp_server.url)], before)]
    assert sorted(grew) == [0, 4], grew
    info = requests.get(f"{dp_server.url}/get_server_info", timeout=30).json()
    assert info["dp_size"] == 2 and info["num_pinned_contexts"] == 0


def test_cache_aware_policy_balances_when_load_is_skewed() -> None:
    policy = RoutingPolicy(2, "cache_aware", balance_abs_threshold=4, balance_rel_threshold=1.5)
    prompt = "s" * 64 + "user"
    first = policy.choose(prompt)
    for _ in range(3):
        policy.started(first)
        assert policy.choose(prompt) == first  # balanced enough: the cache wins
    for _ in range(5):
        policy.started(first)
    assert policy.choose(prompt) != first  # 8 vs 0 in flight passes both thresholds


@pytest.mark.parametrize("name", ["round_robin", "shortest_queue", "random"])
def test_other_policies_ignore_the_cache(name: str) -> None:
    policy = RoutingPolicy(2, name, seed=1)
    picks = [policy.choose("same prefix " * 8) for _ in range(40)]
    assert set(picks) == {0, 1}


def test_unknown_policy_and_merged_stats() -> None:
    with pytest.raises(ValueError, match="routing policy"):
        RoutingPolicy(2, "fastest")
    merged = merge_stats(
        [
            {
                "kv_total": 10,
                "num_running": 1,
                "model": "m",
                "cache_hit_rate": 0.5,
                "cache_hit_tokens": 5,
                "cache_requested_tokens": 10,
            },
            {
                "kv_total": 10,
                "num_running": 2,
                "model": "m",
                "cache_hit_rate": 1.0,
                "cache_hit_tokens": 30,
                "cache_requested_tokens": 30,
            },
        ]
    )
    assert merged["kv_total"] == 20 and merged["num_running"] == 3 and merged["dp_size"] == 2
    assert merged["cache_hit_rate"] == pytest.approx(35 / 40) and merged["model"] == "m"
    assert [r["num_running"] for r in merged["dp_replicas"]] == [1, 2]


def test_engine_refuses_dp_size_naming_it() -> None:
    from radixlm.runtime.engine import Engine

    with pytest.raises(ValueError, match="dp_size"):
        Engine(model="unused", dp_size=2)
