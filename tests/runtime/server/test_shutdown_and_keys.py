"""The API key from the environment (compared, never echoed) and SIGTERM under load: a stream in flight
ends with an error event and [DONE] after the grace period, new requests get 503, the server exits."""

from __future__ import annotations

import json
import signal
import threading

import httpx
import pytest

from radixlm.runtime.server.launch import launch_server
from tests.helpers.waiting import wait_until

KEY = "sk-test-secret-1234"


@pytest.fixture()
def server(tiny_llama_dir):
    with launch_server(
        model=tiny_llama_dir,
        device="cpu",
        num_threads=1,
        kv_cache_gb=0.02,
        context_length=4096,
        shutdown_grace_s=1.0,
        env={"RADIXLM_API_KEY": KEY},
    ) as handle:
        yield handle


def test_key_from_env_then_sigterm_drains(server):
    auth = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=server.url, timeout=60) as c:
        r = c.post("/abort_request", json={"abort_all": True}, headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401 and KEY not in r.text and "wrong" not in r.text
        assert c.post("/generate", json={"text": "hi"}).status_code == 401
        assert c.get("/health").status_code == 401
        assert c.get("/health", headers=auth).status_code == 200
        events: list[str] = []
        started = threading.Event()

        def stream() -> None:
            params = {"max_new_tokens": 4000, "ignore_eos": True}  # outlasts the 1 s grace period
            body = {"text": "a", "stream": True, "sampling_params": params}
            with c.stream("POST", "/generate", json=body, headers=auth) as resp:
                for line in resp.iter_lines():
                    if line.startswith("data: "):
                        events.append(line[6:])
                        started.set()

        t = threading.Thread(target=stream)
        t.start()
        assert started.wait(60)
        server.process.send_signal(signal.SIGTERM)
        wait_until(
            lambda: c.get("/health", headers=auth).status_code == 503, 10, "the server to start draining"
        )
        r = c.post("/generate", json={"text": "hi"}, headers=auth)
        assert r.status_code == 503 and "shutting down" in r.json()["error"]["message"]
        t.join(30)
        assert not t.is_alive()
    assert events[-1] == "[DONE]"
    assert "shutting down" in json.loads(events[-2])["error"]["message"]
    assert server.process.wait(30) is not None
