"""Faults under load: kill -9 of the detokenizer (every process exits promptly, no orphans, clients get
an error) and a second server on a busy port (a clear error, not a hang)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import httpx
import pytest

from radixlm.runtime.server.launch import launch_server
from tests.runtime.server.test_processes import start, wait_gone

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc to find child processes")


def test_killing_the_detokenizer_fails_streams_and_stops_the_server(tiny_llama_dir):
    handle, kids, ipc_dir = start(tiny_llama_dir)
    lines: list[str] = []
    started = threading.Event()

    def stream_client() -> None:
        body = {"text": "a", "stream": True, "sampling_params": {"max_new_tokens": 500, "ignore_eos": True}}
        try:
            with httpx.stream("POST", handle.url + "/generate", json=body, timeout=60) as r:
                for line in r.iter_lines():
                    if line:
                        lines.append(line)
                        started.set()
        except httpx.HTTPError as e:
            lines.append(f"transport error: {e}")

    t = threading.Thread(target=stream_client)
    t.start()
    assert started.wait(60)
    os.kill(kids[1], signal.SIGKILL)  # the detokenizer (started second)
    t.join(30)
    assert not t.is_alive(), "the client hung after the detokenizer died"
    assert handle.process.wait(30) != 0
    wait_gone(kids, timeout=10)
    assert not os.path.exists(ipc_dir)
    assert "detokenizer process exited unexpectedly" in handle.log()
    ended_with_error = lines[-1].startswith("transport error") or any('"error"' in x for x in lines[-3:])
    assert ended_with_error, lines[-3:]


def test_second_server_on_a_busy_port_fails_clearly(tiny_llama_dir):
    with launch_server(model=tiny_llama_dir, device="cpu", num_threads=1, kv_cache_gb=0.02,
                       context_length=256) as first:
        port = first.url.rsplit(":", 1)[1]
        second = subprocess.run([sys.executable, "-m", "radixlm.runtime.server.serve_cli", "--model",
                                 tiny_llama_dir, "--port", port, "--device", "cpu"],
                                capture_output=True, text=True, timeout=120)
        assert second.returncode != 0
        assert f"port {port} is already in use" in second.stderr
        assert httpx.get(first.url + "/health", timeout=10).status_code == 200
