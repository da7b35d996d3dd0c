"""The server's processes: clean stop on SIGTERM/SIGINT, no orphans, a dead child fails clients fast."""

from __future__ import annotations

import glob
import os
import signal
import tempfile
import threading

import httpx
import pytest

from radixlm.runtime.server.launch import launch_server
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc to find child processes")


def children_of(pid: int) -> list[int]:
    kids = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            kids.append(int(stat.split("/")[2]))
    return kids


def workers_of(pid: int) -> list[int]:
    """The scheduler and detokenizer (in start order), leaving out multiprocessing's resource tracker."""

    def cmdline(p: int) -> str:
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    return sorted(p for p in children_of(pid) if "spawn_main" in cmdline(p))


def environ_of(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        items = f.read().decode(errors="replace").split("\0")
    return dict(item.split("=", 1) for item in items if "=" in item)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pids: list[int], timeout: float = 15.0) -> None:
    wait_until(
        lambda: not any(alive(p) for p in pids),
        timeout,
        lambda: f"processes to exit (still running: {[p for p in pids if alive(p)]})",
    )


def ipc_dirs(server_pid: int | str = "*") -> set[str]:
    """Socket directories (of one server process, named by its pid), so other servers don't interfere."""
    return set(glob.glob(os.path.join(tempfile.gettempdir(), f"radixlm-ipc-{server_pid}-*")))


def start(tiny_llama_dir: str, kv_cache_gb: float = 0.02, context_length: int = 512, **server_args):
    handle = launch_server(
        model=tiny_llama_dir,
        device="cpu",
        num_threads=1,
        kv_cache_gb=kv_cache_gb,
        context_length=context_length,
        **server_args,
    )
    workers = workers_of(handle.pid)
    assert len(workers) == 2, f"expected the scheduler and detokenizer, got {workers}"
    kids = workers + [p for p in children_of(handle.pid) if p not in workers]
    new_dirs = ipc_dirs(handle.pid)
    assert len(new_dirs) == 1
    (ipc_dir,) = new_dirs
    assert os.stat(ipc_dir).st_mode & 0o777 == 0o700
    return handle, kids, ipc_dir


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_all_processes_and_removes_sockets(tiny_llama_dir, sig):
    handle, kids, ipc_dir = start(tiny_llama_dir)
    # printed right after the port opens
    wait_until(lambda: "radixlm: serving" in handle.log(), 5, lambda: f"the serving line in {handle.log()}")
    # fp32 weights: the scheduler keeps the user's malloc (only int8's want huge-page malloc)
    assert "glibc.malloc.hugetlb" not in environ_of(kids[0]).get("GLIBC_TUNABLES", "")
    handle.process.send_signal(sig)
    handle.process.wait(30)
    wait_gone(kids)
    assert not os.path.exists(ipc_dir)


def test_killed_server_leaves_no_orphans(tiny_llama_dir):
    handle, kids, ipc_dir = start(tiny_llama_dir, quantization="int8")
    tunables = environ_of(kids[0]).get("GLIBC_TUNABLES", "")  # the process that holds the int8 weights
    assert "glibc.malloc.hugetlb=1" in tunables, tunables
    assert "glibc.malloc.hugetlb" not in environ_of(kids[1]).get("GLIBC_TUNABLES", "")  # the detokenizer
    handle.process.kill()
    handle.process.wait(10)
    wait_gone(kids)  # the children watch their parent
    assert not os.path.exists(ipc_dir)  # and remove the sockets it could not


# Long enough that both requests are still running when the test kills the scheduler: two requests
# of 500 tokens finished in 0.8 s on the tiny model, faster than a loaded CI box polled them.
LONG_GENERATION = 16000


def test_killing_the_scheduler_fails_pending_clients_and_stops_the_server(tiny_llama_dir):
    handle, kids, ipc_dir = start(tiny_llama_dir, kv_cache_gb=0.2, context_length=LONG_GENERATION + 384)
    results: dict[str, object] = {}

    def stream_client() -> None:
        body = {
            "text": "pending",
            "stream": True,
            "sampling_params": {"max_new_tokens": LONG_GENERATION, "temperature": 0, "ignore_eos": True},
        }
        try:
            with httpx.stream("POST", handle.url + "/generate", json=body, timeout=60) as r:
                results["stream"] = [line for line in r.iter_lines() if line]
        except httpx.HTTPError as e:
            results["stream"] = e

    def waiting_client() -> None:
        try:
            results["plain"] = httpx.post(
                handle.url + "/generate",
                json={
                    "text": "waiting",
                    "sampling_params": {"max_new_tokens": LONG_GENERATION, "ignore_eos": True},
                },
                timeout=60,
            )
        except httpx.HTTPError as e:
            results["plain"] = e

    threads = [threading.Thread(target=stream_client), threading.Thread(target=waiting_client)]
    for t in threads:
        t.start()
    wait_until(lambda: _num_in_flight(handle.url) >= 2, 30, "both requests to reach the scheduler")
    scheduler_pid = kids[0]  # started first
    os.kill(scheduler_pid, signal.SIGKILL)
    for t in threads:
        t.join(30)
        assert not t.is_alive(), "a client hung after the scheduler died"
    handle.process.wait(30)
    assert handle.process.returncode != 0
    wait_gone(kids)
    assert not os.path.exists(ipc_dir)
    assert "scheduler process exited unexpectedly" in handle.log()
    plain = results["plain"]
    if isinstance(plain, httpx.Response):  # finished before the kill, or failed with a clear error
        assert plain.status_code in (200, 500)
        if plain.status_code == 500:
            assert "scheduler" in plain.json()["error"]["message"]
    stream = results["stream"]
    if isinstance(stream, list) and stream[-1] == "data: [DONE]":
        assert any("error" in line for line in stream) or '"finish_reason": {' in stream[-2]


def test_scheduler_startup_failure_is_reported(tmp_path):
    with pytest.raises(RuntimeError) as e:
        launch_server(model=str(tmp_path / "no-such-model"), device="cpu", timeout=120)
    assert "no-such-model" in str(e.value)


def _num_in_flight(url: str) -> int:
    stats = httpx.get(url + "/get_server_info", timeout=10).json()["stats"]
    return stats["num_running"] + stats["num_queued"]
