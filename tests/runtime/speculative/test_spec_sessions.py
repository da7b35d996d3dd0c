"""Speculation inside a session: each turn continues the previous one's cached context, the n-gram
proposer drafts from the turns before, and the output is what the whole context gives with
speculation switched off for the request."""

from __future__ import annotations

import httpx
import pytest

from radixlm.runtime.server.launch import launch_server

GREEDY = {"max_new_tokens": 24, "temperature": 0, "ignore_eos": True}
SPEC = dict(speculative_algorithm="NGRAM", speculative_max_batch=64, speculative_speed_check=False)
COMMON = dict(device="cpu", num_threads=1, kv_cache_gb=0.02, context_length=1024, debug_invariants=True)


@pytest.fixture(scope="module")
def client(tiny_llama_dir):
    with launch_server(model=tiny_llama_dir, max_sessions=2, **SPEC, **COMMON) as handle:
        with httpx.Client(base_url=handle.url, timeout=60) as c:
            yield c


def test_session_turns_speculate_and_match_the_whole_context_unspeculated(client):
    sid = client.post("/open_session", json={"capacity_of_str_len": 2000}).json()
    context: list[int] = []
    previous = None
    accepted = 0
    for k in range(4):
        text = "abcabcabc abcabc " * 3 + f"turn {k}"
        body = {"text": text, "sampling_params": GREEDY, "rid": f"{sid}-t{k}"}
        r = client.post("/generate", json={**body, "session_params": {"id": sid, "rid": previous}})
        assert r.status_code == 200, r.text
        out = r.json()
        new = client.post("/v1/tokenize", json={"prompt": text, "add_special_tokens": False}).json()
        context += new["tokens"]
        plain = client.post(
            "/generate", json={"input_ids": context, "sampling_params": {**GREEDY, "speculative": False}}
        ).json()
        assert out["output_ids"] == plain["output_ids"], k
        assert plain["meta_info"].get("spec_verify_ct", 0) == 0
        accepted += out["meta_info"].get("spec_accept_token_num", 0)
        context += out["output_ids"]
        previous = f"{sid}-t{k}"
    assert accepted > 0
    assert client.post("/close_session", json={"session_id": sid}).status_code == 200
    stats = client.get("/get_server_info").json()["stats"]
    assert stats["kv_protected"] == 0 and stats["kv_free"] + stats["kv_cached"] == stats["kv_total"]
