"""Faults under load: kill -9 of the detokenizer (every process exits promptly, no orphans, clients get
an error) and a second server on a busy port (a clear error, not a hang)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest
import zmq

from radixlm.runtime.ipc import zmq_socket
from radixlm.runtime.server.launch import launch_server
from tests.helpers.waiting import wait_until
from tests.runtime.server.test_processes import (
    LONG_GENERATION,
    children_of,
    ipc_dirs,
    start,
    wait_gone,
    workers_of,
)

# Requests long enough to be still running when a test breaks a process (500 tokens: 0.8 s)
LONG_SERVER = dict(kv_cache_gb=0.2, context_length=LONG_GENERATION + 384)

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc to find child processes")


def test_killing_the_detokenizer_fails_streams_and_stops_the_server(tiny_llama_dir):
    handle, kids, ipc_dir = start(tiny_llama_dir, **LONG_SERVER)
    lines: list[str] = []
    started = threading.Event()

    def stream_client() -> None:
        body = {
            "text": "a",
            "stream": True,
            "sampling_params": {"max_new_tokens": LONG_GENERATION, "ignore_eos": True},
        }
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
    with launch_server(
        model=tiny_llama_dir, device="cpu", num_threads=1, kv_cache_gb=0.02, context_length=256
    ) as first:
        port = first.url.rsplit(":", 1)[1]
        second = subprocess.run(
            [
                sys.executable,
                "-m",
                "radixlm.runtime.server.serve_cli",
                "--model",
                tiny_llama_dir,
                "--port",
                port,
                "--device",
                "cpu",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode != 0
        assert f"port {port} is already in use" in second.stderr
        assert httpx.get(first.url + "/health", timeout=10).status_code == 200


def _descendants(pid: int) -> list[int]:
    found, frontier = [], [pid]
    while frontier:
        kids = [k for p in frontier for k in children_of(p)]
        found.extend(kids)
        frontier = kids
    return found


def test_killing_the_scheduler_under_load_fails_every_client_and_stops_everything(tiny_llama_dir):
    """kill -9 of the scheduler while streams, plain requests and a grammar compile process are busy:
    every client ends with an error within seconds, the server exits non-zero, and no process of
    the tree (the compile worker, a grandchild, included) is left behind."""
    handle = launch_server(
        model=tiny_llama_dir, device="cpu", num_threads=1, grammar_backend="outlines", **LONG_SERVER
    )
    scheduler, detokenizer = workers_of(handle.pid)
    (ipc_dir,) = ipc_dirs(handle.pid)
    long = {"max_new_tokens": LONG_GENERATION, "ignore_eos": True}
    # a constrained request first: its compile starts an outlines worker under the scheduler
    regex = {"text": "x", "sampling_params": {"max_new_tokens": 4, "regex": "[a-z]{4}"}}
    assert httpx.post(handle.url + "/generate", json=regex, timeout=120).status_code == 200
    tree = _descendants(handle.pid)
    compile_workers = [p for p in _descendants(scheduler)]
    assert compile_workers, "no compile process started under the scheduler"

    endings: dict[str, str] = {}
    streaming = threading.Barrier(4 + 1)

    def stream_client(name: str) -> None:
        body = {"text": name, "stream": True, "sampling_params": long}
        lines: list[str] = []
        try:
            with httpx.stream("POST", handle.url + "/generate", json=body, timeout=60) as r:
                for line in r.iter_lines():
                    if not line:
                        continue
                    lines.append(line)
                    if len(lines) == 2:
                        streaming.wait(30)
            endings[name] = " | ".join(lines[-2:])
        except httpx.HTTPError as e:
            endings[name] = f"transport error: {e}"

    def plain_client(name: str) -> None:
        try:
            r = httpx.post(handle.url + "/generate", json={"text": name, "sampling_params": long}, timeout=60)
            endings[name] = f"{r.status_code} {r.text[:300]}"
        except httpx.HTTPError as e:
            endings[name] = f"transport error: {e}"

    clients = [threading.Thread(target=stream_client, args=(f"stream-{i}",)) for i in range(4)]
    clients += [threading.Thread(target=plain_client, args=(f"plain-{i}",)) for i in range(2)]
    for t in clients:
        t.start()
    streaming.wait(60)  # four streams are producing tokens
    os.kill(scheduler, signal.SIGKILL)
    killed_at = time.monotonic()
    for t in clients:
        t.join(30)
        assert not t.is_alive(), "a client hung after the scheduler died"
    assert handle.process.wait(30) != 0
    assert time.monotonic() - killed_at < 15, "the server took too long to go down"
    wait_gone(tree + compile_workers + [detokenizer], timeout=10)
    assert not os.path.exists(ipc_dir)
    assert "scheduler process exited unexpectedly" in handle.log()
    for name, last in endings.items():
        if name.startswith("stream"):  # an error event then [DONE], or a cut connection
            assert last.startswith("transport error") or '"error"' in last, (name, last)
        else:
            assert last.startswith(("transport error", "500", "503")), (name, last)


def test_a_failing_receive_loop_fails_clients_and_stops_the_server(tiny_llama_dir):
    """A malformed message on the tokenizer manager's socket kills its receive loop: the pending
    client gets a 500 naming the failure at once, and the server exits instead of hanging."""
    handle, kids, ipc_dir = start(tiny_llama_dir, **LONG_SERVER)
    body = {"text": "pending", "sampling_params": {"max_new_tokens": LONG_GENERATION, "ignore_eos": True}}
    ending: dict[str, httpx.Response] = {}
    client = threading.Thread(
        target=lambda: ending.update(r=httpx.post(handle.url + "/generate", json=body, timeout=60))
    )
    client.start()
    wait_until(lambda: _num_running(handle.url) >= 1, 30, "the request to run")
    ctx = zmq.Context()
    sock = zmq_socket(ctx, zmq.PUSH, f"ipc://{ipc_dir}/tokenizer_manager", bind=False)
    sock.send(b"\x00 not a pickle")
    failed_at = time.monotonic()
    client.join(30)
    sock.close()
    ctx.term()
    assert not client.is_alive(), "the client hung after the receive loop failed"
    assert ending["r"].status_code == 500
    assert "receive loop failed" in ending["r"].json()["error"]["message"]
    assert handle.process.wait(30) != 0
    assert time.monotonic() - failed_at < 15, "the server took too long to go down"
    wait_gone(kids, timeout=10)
    assert not os.path.exists(ipc_dir)


def _num_running(url: str) -> int:
    return httpx.get(url + "/get_server_info", timeout=10).json()["num_running"]
