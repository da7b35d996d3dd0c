"""``radixlm router`` in front of two ``radixlm serve`` processes: routing by prefix, streaming passed
through, a killed worker taken out of rotation with no failed request that had not started."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import requests

from radixlm.runtime.server.launch import free_port, launch_server
from tests.helpers.waiting import wait_until

GREEDY = {"max_new_tokens": 4, "temperature": 0}
SYSTEM_A = "You are the billing assistant of a large company, be precise. " * 3
SYSTEM_B = "Eres un asistente de viajes; responde siempre con una lista. " * 3


@pytest.fixture(scope="module")
def workers(tiny_llama_dir):
    servers = [
        launch_server(tiny_llama_dir, device="cpu", kv_cache_gb=0.02, debug_invariants=True) for _ in range(2)
    ]
    yield servers
    for s in servers:
        s.shutdown()


@pytest.fixture(scope="module")
def router(workers):
    port = free_port()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "radixlm.runtime.router.router_cli",
            "--port",
            str(port),
            "--health-check-interval",
            "0.5",
            "--worker-urls",
            *[w.url for w in workers],
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert proc.poll() is None, "the router exited"
        try:
            return requests.get(url + "/health", timeout=2).status_code == 200
        except requests.ConnectionError:
            return False

    wait_until(healthy, 120, "the router to answer /health")
    yield url
    proc.terminate()
    proc.wait(10)


def _generate(url: str, text: str) -> requests.Response:
    reply = requests.post(f"{url}/generate", json={"text": text, "sampling_params": GREEDY}, timeout=120)
    assert reply.status_code == 200, reply.text
    return reply


def test_requests_sharing_a_prefix_go_to_one_worker(router, workers) -> None:
    seen_a = {_generate(router, SYSTEM_A + f"user {i}").headers["x-radixlm-worker"] for i in range(4)}
    seen_b = {_generate(router, SYSTEM_B + f"user {i}").headers["x-radixlm-worker"] for i in range(4)}
    assert len(seen_a) == 1 and len(seen_b) == 1 and seen_a != seen_b
    direct = requests.post(
        f"{next(iter(seen_a))}/generate",
        timeout=60,
        json={"text": SYSTEM_A + "user 0", "sampling_params": GREEDY},
    ).json()
    assert _generate(router, SYSTEM_A + "user 0").json()["text"] == direct["text"]


def test_streaming_and_openai_pass_through(router) -> None:
    with requests.post(
        f"{router}/generate",
        stream=True,
        timeout=120,
        json={"text": "hello", "sampling_params": GREEDY, "stream": True},
    ) as reply:
        body = b"".join(reply.iter_content(None)).decode()
    assert reply.status_code == 200 and "data: [DONE]" in body
    chat = requests.post(
        f"{router}/v1/chat/completions",
        timeout=120,
        json={"model": "x", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
    )
    assert chat.status_code == 200 and chat.json()["choices"][0]["message"]["role"] == "assistant"
    assert requests.post(f"{router}/generate", data="{", timeout=30).status_code == 400


def test_killed_worker_is_taken_out_without_failing_requests(router, workers) -> None:
    victim_url = _generate(router, SYSTEM_A + "who handles me?").headers["x-radixlm-worker"]
    victim = next(w for w in workers if w.url == victim_url)
    victim.process.kill()
    victim.process.wait(30)
    # Requests for the victim's prefix had not started anywhere: each is retried on the live worker.
    for i in range(4):
        reply = _generate(router, SYSTEM_A + f"after the kill {i}")
        assert reply.headers["x-radixlm-worker"] != victim_url

    def states_once_victim_dead() -> dict[str, bool] | None:
        info = requests.get(f"{router}/get_server_info", timeout=10).json()
        states = {w["url"]: w["alive"] for w in info["workers"]}
        return states if not states[victim_url] else None

    states = wait_until(states_once_victim_dead, 30, "the router to mark the killed worker dead")
    assert states == {victim_url: False, next(w.url for w in workers if w is not victim): True}
