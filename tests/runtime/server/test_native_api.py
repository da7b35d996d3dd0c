"""The native (SGLang-compatible) HTTP API against a real server process on a tiny random model."""

from __future__ import annotations

import json

import httpx
import pytest

from radixlm.runtime.server.launch import launch_server
from tests.helpers.waiting import wait_until

GREEDY = {"temperature": 0, "max_new_tokens": 8}


@pytest.fixture(scope="module")
def server(tiny_llama_dir):
    with launch_server(
        model=tiny_llama_dir,
        device="cpu",
        num_threads=1,
        kv_cache_gb=0.02,
        context_length=512,
        debug_invariants=True,
    ) as handle:
        yield handle


@pytest.fixture()
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def stats(client: httpx.Client) -> dict:
    r = client.get("/get_server_info")
    assert r.status_code == 200
    return r.json()["stats"]


def wait_in_flight(client: httpx.Client, count: int, timeout_s: float = 20) -> None:
    """Until at least ``count`` requests (samples included) run or wait in the scheduler."""
    s: dict = {}

    def in_flight() -> bool:
        s.update(stats(client))
        return s["num_running"] + s["num_queued"] >= count

    wait_until(in_flight, timeout_s, lambda: f"{count} requests in flight (last stats: {s})", interval=0.01)


def assert_kv_idle(client: httpx.Client) -> None:
    """Every KV slot is free or cached (nothing leaked), waiting briefly for aborts to land."""
    s: dict = {}

    def idle() -> bool:
        s.update(stats(client))
        return s["num_running"] == 0 and s["num_queued"] == 0 and s["kv_used"] == 0

    wait_until(idle, 10, lambda: f"the KV to go idle (last stats: {s})")
    assert s["kv_free"] + s["kv_cached"] == s["kv_total"]


def test_single_generate(client):
    r = client.post("/generate", json={"text": "Hello world", "sampling_params": GREEDY, "rid": "r-single"})
    assert r.status_code == 200
    out = r.json()
    assert isinstance(out["text"], str) and len(out["output_ids"]) == 8
    meta = out["meta_info"]
    assert meta["id"] == "r-single"
    assert meta["finish_reason"] == {"type": "length", "length": 8}
    assert meta["prompt_tokens"] == len("Hello world") and meta["completion_tokens"] == 8
    assert meta["e2e_latency"] > 0 and "cached_tokens" in meta


def test_batch_and_n_give_lists_in_order(client):
    one = client.post("/generate", json={"text": "abc", "sampling_params": GREEDY}).json()
    outs = client.post(
        "/generate", json={"text": ["abc", "xyz"], "sampling_params": {**GREEDY, "n": 2}}
    ).json()
    assert isinstance(outs, list) and len(outs) == 4
    assert outs[0]["output_ids"] == outs[1]["output_ids"] == one["output_ids"]  # greedy: same text
    assert outs[2]["output_ids"] == outs[3]["output_ids"]
    by_ids = client.post("/generate", json={"input_ids": [[97, 98], [99]], "sampling_params": GREEDY}).json()
    assert [o["meta_info"]["prompt_tokens"] for o in by_ids] == [2, 1]


def test_stream_is_cumulative_and_ends_with_done(client):
    final = client.post("/generate", json={"text": "stream me", "sampling_params": GREEDY}).json()
    events = []
    with client.stream(
        "POST", "/generate", json={"text": "stream me", "sampling_params": GREEDY, "stream": True}
    ) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data:"):
                events.append(line[5:].strip())
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    texts = [c["text"] for c in chunks]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:]))  # cumulative, never moves backwards
    assert texts[-1] == final["text"] and chunks[-1]["output_ids"] == final["output_ids"]
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])


def test_prefill_only_scores_the_prompt(client):
    body = {
        "text": ["Hello", "Help"],
        "sampling_params": {"max_new_tokens": 0, "temperature": 0},
        "return_logprob": True,
        "logprob_start_len": 0,
        "return_text_in_logprobs": True,
    }
    outs = client.post("/generate", json=body).json()
    for out, prompt in zip(outs, ["Hello", "Help"]):
        assert out["output_ids"] == [] and out["text"] == ""
        entries = out["meta_info"]["input_token_logprobs"]
        assert len(entries) == len(prompt) and entries[0][0] is None
        assert [e[2] for e in entries] == list(prompt)
        assert all(isinstance(e[0], float) and e[0] <= 0 for e in entries[1:])


def test_output_logprobs_with_top(client):
    body = {"text": "Hi", "sampling_params": GREEDY, "return_logprob": True, "top_logprobs_num": 3}
    meta = client.post("/generate", json=body).json()["meta_info"]
    assert len(meta["output_token_logprobs"]) == 8 and len(meta["output_top_logprobs"]) == 8
    for (lp, tid, text), top in zip(meta["output_token_logprobs"], meta["output_top_logprobs"]):
        assert text is None and len(top) == 3
        assert tid == top[0][1] and abs(lp - top[0][0]) < 1e-4  # greedy picks the top token


def test_sglang_client_quirks_accepted(client):
    # RuntimeEndpoint sends tuple defaults as one-element lists and None for unused fields.
    body = {
        "text": "q",
        "sampling_params": {
            **GREEDY,
            "stop": [],
            "stop_token_ids": [],
            "regex": None,
            "json_schema": None,
            "skip_special_tokens": True,
            "spaces_between_special_tokens": True,
        },
        "logprob_start_len": [None],
        "top_logprobs_num": [None],
        "return_text_in_logprobs": [None],
    }
    assert client.post("/generate", json=body).status_code == 200
    assert client.post("/concate_and_append_request", json={"src_rids": ["a"], "dst_rid": "b"}).json() == {
        "success": True
    }


@pytest.mark.parametrize(
    "body, fragment",
    [
        ([1, 2], "JSON object"),
        ({"sampling_params": GREEDY}, "exactly one of text and input_ids"),
        ({"text": "a", "input_ids": [1]}, "exactly one of text and input_ids"),
        ({"text": "a", "bogus": 1}, "unknown field"),
        ({"text": "a", "sampling_params": {"temperature": -1}}, "temperature"),
        ({"text": "a", "sampling_params": {"max_tokens": 3}}, "unknown sampling parameter"),
        ({"text": "a", "image_data": "x.png"}, "text-only"),
        ({"text": "a", "audio_data": "x.wav"}, "not supported"),
        ({"input_ids": [1, 99999]}, "vocabulary"),
        ({"text": ""}, "empty"),
        ({"text": "x" * 600}, "context length"),
        ({"text": ["a", "b"], "rid": ["only-one"]}, "rid has 1 values for 2 prompts"),
    ],
)
def test_bad_requests_are_clear_400s(client, body, fragment):
    r = client.post("/generate", json=body)
    assert r.status_code == 400
    assert fragment in r.json()["error"]["message"]


def test_invalid_json_is_a_400(client):
    r = client.post("/generate", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]


def test_model_info_flush_and_server_info(client):
    info = client.get("/get_model_info").json()
    assert info["is_generation"] is True and info["model_path"] and info["chat_template"]
    assert client.post("/flush_cache").status_code == 200
    s = stats(client)
    assert s["kv_cached"] == 0 and s["kv_free"] == s["kv_total"]
    assert client.get("/server_info").json()["context_length"] == 512
    assert client.get("/health").status_code == 200


def test_abort_by_rid(client, server):
    import threading

    result = {}

    def run():
        body = {
            "text": "long",
            "rid": "to-abort",
            "sampling_params": {"max_new_tokens": 400, "temperature": 0, "ignore_eos": True},
        }
        with httpx.Client(base_url=server.url, timeout=60) as c:
            result["out"] = c.post("/generate", json=body).json()

    thread = threading.Thread(target=run)
    thread.start()
    wait_until(
        lambda: client.post("/abort_request", json={"rid": "to-abort"}).json()["success"],
        20,
        "the request to run so that it can be aborted",
        interval=0.01,
    )
    thread.join(30)
    meta = result["out"]["meta_info"]
    assert meta["finish_reason"]["type"] == "abort" and meta["completion_tokens"] < 400
    assert client.post("/abort_request", json={"rid": "to-abort"}).json() == {"success": False}
    assert_kv_idle(client)


def test_rid_in_flight_refused_and_former_sample_ids_are_free(client, server):
    """While ``grp`` runs with n = 2, ``grp`` is refused but ``grp-0`` (what its samples used to run
    under) is another request; aborting ``grp`` ends its two samples and leaves ``grp-0`` alone."""
    import threading

    result = {}
    long = {"max_new_tokens": 400, "temperature": 0, "ignore_eos": True}

    def run(key, body):
        with httpx.Client(base_url=server.url, timeout=60) as c:
            result[key] = c.post("/generate", json=body).json()

    threads = [
        threading.Thread(
            target=run,
            args=("grp", {"text": "two samples", "rid": "grp", "sampling_params": {**long, "n": 2}}),
        ),
        threading.Thread(
            target=run,
            args=(
                "grp-0",
                {"text": "a client rid", "rid": "grp-0", "sampling_params": {**long, "max_new_tokens": 200}},
            ),
        ),
    ]
    # One at a time, and the second long enough to be seen in flight on a busy machine.
    threads[0].start()
    wait_in_flight(client, 2)
    threads[1].start()
    wait_in_flight(client, 3)
    r = client.post("/generate", json={"text": "x", "rid": "grp", "sampling_params": GREEDY})
    assert r.status_code == 400 and "'grp'" in r.json()["error"]["message"], r.text
    bad = client.post("/generate", json={"text": "x", "rid": "grp\x1f0", "sampling_params": GREEDY})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "rid", bad.text
    assert client.post("/abort_request", json={"rid": "grp\x1f0"}).json() == {"success": False}
    assert client.post("/abort_request", json={"rid": "grp"}).json()["success"]
    for thread in threads:
        thread.join(30)
    assert [o["meta_info"]["finish_reason"]["type"] for o in result["grp"]] == ["abort", "abort"]
    assert [o["meta_info"]["id"] for o in result["grp"]] == ["grp-0", "grp-1"]
    assert result["grp-0"]["meta_info"]["finish_reason"] == {"type": "length", "length": 200}
    assert result["grp-0"]["meta_info"]["id"] == "grp-0"
    assert_kv_idle(client)


def test_disconnect_of_an_n4_request_aborts_all_four(client, server):
    before = stats(client)["num_generated_tokens"]
    body = {
        "text": "four samples",
        "stream": True,
        "rid": "four",
        "sampling_params": {"max_new_tokens": 400, "temperature": 0.7, "ignore_eos": True, "n": 4},
    }
    with httpx.Client(base_url=server.url, timeout=60) as c:
        with c.stream("POST", "/generate", json=body) as r:
            for i, _ in enumerate(r.iter_lines()):
                if i > 6:
                    break
    assert_kv_idle(client)
    assert stats(client)["num_generated_tokens"] - before < 4 * 400 / 2  # all four stopped early


def test_client_disconnect_mid_stream_frees_kv(client, server):
    body = {
        "text": "disconnect",
        "stream": True,
        "rid": "gone",
        "sampling_params": {"max_new_tokens": 400, "temperature": 0, "ignore_eos": True},
    }
    with httpx.Client(base_url=server.url, timeout=60) as c:
        with c.stream("POST", "/generate", json=body) as r:
            for i, _ in enumerate(r.iter_lines()):
                if i > 3:
                    break  # closing the response drops the connection mid-stream
    assert_kv_idle(client)
    after = client.post("/generate", json={"text": "still fine", "sampling_params": GREEDY})
    assert after.status_code == 200


def test_invalid_burst_between_valid_requests(client):
    expected = client.post("/generate", json={"text": "valid", "sampling_params": GREEDY}).json()["text"]
    for i in range(30):
        bad = [{"text": ""}, {"text": "a", "sampling_params": {"top_p": 0}}, {"input_ids": [-1]}][i % 3]
        assert client.post("/generate", json=bad).status_code == 400
        assert (
            client.post("/generate", json={"text": "valid", "sampling_params": GREEDY}).json()["text"]
            == expected
        )
    assert_kv_idle(client)


def test_openai_n3_abort_by_rid_ends_its_choices_only(client, server):
    """/abort_request with an OpenAI request's rid ends its three choices, not a look-alike rid's."""
    import threading

    result = {}

    def run(key, body):
        with httpx.Client(base_url=server.url, timeout=60) as c:
            result[key] = c.post("/v1/completions", json=body)

    long = {"model": "m", "max_tokens": 300, "temperature": 0.5, "ignore_eos": True}
    threads = [
        threading.Thread(target=run, args=("oa", {**long, "prompt": "three", "n": 3, "rid": "oa"})),
        threading.Thread(
            target=run, args=("oa-1", {**long, "prompt": "one", "rid": "oa-1", "max_tokens": 200})
        ),
    ]
    before = stats(client)["num_generated_tokens"]
    threads[0].start()
    wait_in_flight(client, 3)
    threads[1].start()
    wait_in_flight(client, 4)
    assert client.post("/abort_request", json={"rid": "oa"}).json()["success"]
    for thread in threads:
        thread.join(30)
    assert result["oa-1"].status_code == 200
    assert result["oa-1"].json()["usage"]["completion_tokens"] == 200
    assert stats(client)["num_generated_tokens"] - before < 200 + 3 * 300 / 2
    assert_kv_idle(client)
