"""Sessions: a multi-turn conversation sends only its new text each turn, its earlier turns are served
from the radix cache (pinned between turns), closing releases the pins, and idle sessions expire."""

from __future__ import annotations

import httpx
import pytest

from radixlm.runtime.server.launch import launch_server
from tests.helpers.waiting import wait_until

GREEDY = {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True}
COMMON = dict(device="cpu", num_threads=1, kv_cache_gb=0.02, context_length=512, debug_invariants=True)


@pytest.fixture(scope="module")
def server(tiny_llama_dir):
    with launch_server(model=tiny_llama_dir, max_sessions=2, session_timeout=120, **COMMON) as handle:
        yield handle


@pytest.fixture()
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def _stats(client: httpx.Client) -> dict:
    return client.get("/get_server_info").json()["stats"]


def _open(client: httpx.Client, **body) -> str:
    r = client.post("/open_session", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_five_turns_send_only_new_text_and_hit_the_cache(client):
    sid = _open(client, capacity_of_str_len=400)
    context: list[int] = []
    previous = None
    for k in range(5):
        new_text = f"User: turn {k}?\nAssistant:"
        params = {"id": sid, "rid": previous}
        r = client.post(
            "/generate",
            json={
                "text": new_text,
                "sampling_params": GREEDY,
                "rid": f"{sid}-t{k}",
                "session_params": params,
            },
        )
        assert r.status_code == 200, r.text
        out = r.json()
        new_ids = client.post("/v1/tokenize", json={"prompt": new_text, "add_special_tokens": False}).json()
        context = context + new_ids["tokens"]
        meta = out["meta_info"]
        assert meta["prompt_tokens"] == len(context)
        if k > 0:  # the previous turns (all but the last sampled token, never computed) came from the cache
            assert meta["cached_tokens"] >= len(context) - len(new_ids["tokens"]) - 1
        # The same context sent whole gives the same continuation: the session changed nothing but cost.
        whole = client.post("/generate", json={"input_ids": context, "sampling_params": GREEDY}).json()
        assert whole["output_ids"] == out["output_ids"]
        context = context + out["output_ids"]
        previous = f"{sid}-t{k}"
        assert _stats(client)["num_pinned_contexts"] >= 1
    r = client.post("/close_session", json={"session_id": sid})
    assert r.status_code == 200
    stats = _stats(client)
    assert stats["num_pinned_contexts"] == 0 and stats["kv_protected"] == 0
    assert stats["kv_free"] + stats["kv_cached"] == stats["kv_total"]
    again = client.post("/generate", json={"text": "more", "session_params": {"id": sid, "rid": previous}})
    assert again.status_code == 400 and "no open session" in again.json()["error"]["message"]


def test_offset_and_drop_previous_output_branch_from_a_turn(client):
    sid = _open(client)
    first = client.post(
        "/generate",
        json={"text": "Hello there", "sampling_params": GREEDY, "rid": "b0", "session_params": {"id": sid}},
    ).json()
    n_first = first["meta_info"]["prompt_tokens"]
    cut = client.post(
        "/generate",
        json={
            "text": "!",
            "sampling_params": GREEDY,
            "rid": "b1",
            "session_params": {"id": sid, "rid": "b0", "offset": 5},
        },
    ).json()
    assert cut["meta_info"]["prompt_tokens"] == 5 + 1
    dropped = client.post(
        "/generate",
        json={
            "text": "?",
            "sampling_params": GREEDY,
            "rid": "b2",
            "session_params": {"id": sid, "rid": "b0", "drop_previous_output": True},
        },
    ).json()
    assert dropped["meta_info"]["prompt_tokens"] == n_first + 1
    replaced = client.post(
        "/generate",
        json={
            "text": "x",
            "sampling_params": GREEDY,
            "rid": "b3",
            "session_params": {"id": sid, "rid": "b0", "replace": True},
        },
    )
    assert replaced.status_code == 200
    gone = client.post("/generate", json={"text": "y", "session_params": {"id": sid, "rid": "b1"}})
    assert gone.status_code == 400 and "is not a turn" in gone.json()["error"]["message"]
    assert client.post("/close_session", json={"session_id": sid}).status_code == 200
    assert _stats(client)["num_pinned_contexts"] == 0


def test_bad_session_requests_get_a_400_naming_the_problem(client):
    sid = _open(client, session_id="fixed-id")
    assert sid == "fixed-id"
    dup = client.post("/open_session", json={"session_id": "fixed-id"})
    assert dup.status_code == 400 and "already open" in dup.json()["error"]["message"]
    other = _open(client)
    full = client.post("/open_session", json={})
    assert full.status_code == 429 and "too many open sessions" in full.json()["error"]["message"]
    cases = [
        ({"text": "a", "session_params": {"id": "nope"}}, "no open session"),
        ({"text": "a", "session_params": {"id": sid, "rid": "missing"}}, "is not a turn"),
        ({"text": ["a", "b"], "session_params": {"id": sid}}, "single prompt"),
        ({"text": "a", "session_params": {"id": sid, "bogus": 1}}, "keys among"),
        ({"text": "a", "session_params": {"id": sid, "offset": -2}}, "offset"),
        ({"text": "a", "sampling_params": {"n": 2}, "session_params": {"id": sid}}, "n == 1"),
    ]
    for body, why in cases:
        r = client.post("/generate", json=body)
        assert r.status_code == 400 and why in r.json()["error"]["message"], (body, r.text)
    for s in (sid, other):
        assert client.post("/close_session", json={"session_id": s}).status_code == 200
    assert client.post("/close_session", json={"session_id": sid}).status_code == 400
    tight = _open(client, capacity_of_str_len=4)
    over = client.post("/generate", json={"text": "too long for it", "session_params": {"id": tight}})
    assert over.status_code == 400 and "capacity" in over.json()["error"]["message"]
    client.post("/close_session", json={"session_id": tight})


def test_idle_sessions_expire_and_release_their_pins(tiny_llama_dir):
    with launch_server(model=tiny_llama_dir, session_timeout=1.0, **COMMON) as handle:
        with httpx.Client(base_url=handle.url, timeout=60) as client:
            sid = _open(client)
            r = client.post(
                "/generate",
                json={
                    "text": "Remember me",
                    "sampling_params": GREEDY,
                    "rid": "e0",
                    "session_params": {"id": sid},
                },
            )
            assert r.status_code == 200
            wait_until(lambda: not _stats(client)["num_pinned_contexts"], 15, "the session to expire", 0.2)
            stats = _stats(client)
            assert stats["num_pinned_contexts"] == 0 and stats["kv_protected"] == 0
            late = client.post("/generate", json={"text": "x", "session_params": {"id": sid, "rid": "e0"}})
            assert late.status_code == 400 and "expired" in late.json()["error"]["message"]
