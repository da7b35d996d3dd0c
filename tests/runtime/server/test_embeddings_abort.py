"""An embedding request whose client leaves, or that ``/abort_request`` names, is dropped by the
scheduler (its queued sequences never run), frees its KV, and the server keeps answering.

The request is long (thousands of 16-token prefill steps), so it is still in flight whatever the
load of the machine: the test waits until the server reports it running, then aborts it."""

from __future__ import annotations

import json
import socket
import threading

import httpx
import pytest

from radixlm.runtime.messages import CLIENT_ABORT_STATUS
from radixlm.runtime.server.launch import launch_server
from tests.helpers.embedding_models import save_st_decoder
from tests.helpers.kv_ownership import assert_server_kv_returned
from tests.helpers.model_helpers import tiny_qwen3_config
from tests.helpers.waiting import wait_until

SERVER = dict(
    device="cpu",
    num_threads=1,
    kv_cache_gb=0.02,
    context_length=256,
    is_embedding=True,
    chunked_prefill_size=16,
    max_prefill_tokens=16,
)
BIG = [[(7 * i + j) % 200 + 3 for j in range(200)] for i in range(256)]  # 51,200 tokens: 3,200 steps
TOTAL_TOKENS = sum(map(len, BIG))
SMALL = {"input": [[5, 6, 7, 8]]}
TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def embedder(tmp_path_factory):
    path = save_st_decoder(tiny_qwen3_config(), tmp_path_factory.mktemp("emb"), "lasttoken", True)
    with launch_server(model=str(path), **SERVER) as handle:
        yield handle


def _stats(url: str) -> dict:
    return httpx.get(url + "/get_server_info", timeout=60).json()


def _wait_running(url: str, before: dict) -> None:
    """Until the big request is in the scheduler and some of it has been computed."""

    def running() -> bool:
        s = _stats(url)
        return s["num_encode_jobs"] == 1 and s["num_prefill_tokens"] > before["num_prefill_tokens"]

    wait_until(running, TIMEOUT_S, "the big embedding request to start", interval=0.05)


def _wait_dropped(url: str, before: dict) -> dict:
    def dropped() -> dict | None:
        s = _stats(url)
        done = s["num_encode_jobs"] == 0 and s["num_encode_aborted"] == before["num_encode_aborted"] + 1
        return s if done else None

    stats = wait_until(dropped, TIMEOUT_S, lambda: f"the abort to land (last seen {_stats(url)})", 0.05)
    # NOTE: dropped, not run to its end: most of its tokens were never computed
    assert stats["num_prefill_tokens"] - before["num_prefill_tokens"] < TOTAL_TOKENS // 2, stats
    return stats


def _small_vector(url: str) -> list[float]:
    r = httpx.post(url + "/v1/embeddings", json=SMALL, timeout=TIMEOUT_S)
    assert r.status_code == 200, r.text
    return r.json()["data"][0]["embedding"]


def test_a_disconnected_client_s_request_is_dropped(embedder):
    url = embedder.url
    expected = _small_vector(url)
    before = _stats(url)
    body = json.dumps({"input": BIG}).encode()
    host, port = url.split("//")[1].rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=30)
    head = f"POST /v1/embeddings HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
    sock.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
    try:
        _wait_running(url, before)
    finally:
        sock.close()  # the client leaves
    _wait_dropped(url, before)
    assert _small_vector(url) == pytest.approx(expected, abs=1e-6)  # the server keeps answering
    assert_server_kv_returned(url)


def test_abort_request_by_rid(embedder):
    url = embedder.url
    expected = _small_vector(url)
    before = _stats(url)
    result: dict[str, httpx.Response] = {}

    def post() -> None:
        result["r"] = httpx.post(url + "/encode", json={"input_ids": BIG, "rid": "big"}, timeout=TIMEOUT_S)

    thread = threading.Thread(target=post)
    thread.start()
    try:
        _wait_running(url, before)
        r = httpx.post(url + "/abort_request", json={"rid": "big"}, timeout=60)
        assert r.json() == {"success": True}
    finally:
        thread.join(TIMEOUT_S)
    assert result["r"].status_code == CLIENT_ABORT_STATUS, result["r"].text
    _wait_dropped(url, before)
    assert httpx.post(url + "/abort_request", json={"rid": "big"}, timeout=60).json() == {"success": False}
    assert _small_vector(url) == pytest.approx(expected, abs=1e-6)
    assert_server_kv_returned(url)
