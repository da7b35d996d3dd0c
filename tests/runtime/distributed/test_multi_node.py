"""SGLang's multi-node flags on one machine: ``--nnodes 2 --node-rank 0/1 --dist-init-addr
127.0.0.1:PORT`` with tp_size 2, as two separately launched ``radixlm serve`` processes (one rank each,
as on two machines), serve what tp_size 1 serves; the second node's process exits when the server
stops or dies; inconsistent flags are refused naming the flag."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest
import requests

from radixlm.runtime.engine import Engine
from radixlm.runtime.server.launch import free_port, launch_server, server_flags
from radixlm.runtime.server_args import ServerArgs
from tests.helpers.engines import make_engine

PROMPTS = ["The quick brown fox jumps over", "x" * 40]
GREEDY = {"max_new_tokens": 16, "temperature": 0, "ignore_eos": True}
EXIT_TIMEOUT_S = 60


def _start_first_node(model: str, addr: str):
    """Node 0 of two (tp 2, one rank per node): the server, in this test's process tree."""
    return launch_server(
        model, device="cpu", tp_size=2, nnodes=2, node_rank=0, dist_init_addr=addr, kv_cache_gb=0.05
    )


def _start_second_node(model: str, addr: str) -> subprocess.Popen:
    """``radixlm serve --nnodes 2 --node-rank 1 ...``: runs rank 1 and waits for node 0."""
    args = ServerArgs(
        model=model, device="cpu", tp_size=2, nnodes=2, node_rank=1, dist_init_addr=addr, kv_cache_gb=0.05
    )
    # its own session: killing the process group is losing the whole second machine
    return subprocess.Popen(
        [sys.executable, "-m", "radixlm.runtime.server.serve_cli", *server_flags(args)],
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


@contextlib.contextmanager
def _second_node(model: str) -> Iterator[tuple[subprocess.Popen, str]]:
    """The second node started (and its process group killed at the end) with its init address."""
    addr = f"127.0.0.1:{free_port()}"
    node1 = _start_second_node(model, addr)
    try:
        yield node1, addr
    finally:
        _stop(node1)


def _generate(url: str) -> list[list[int]]:
    out = []
    for prompt in PROMPTS:
        r = requests.post(f"{url}/generate", json={"text": prompt, "sampling_params": GREEDY}, timeout=120)
        assert r.status_code == 200, r.text
        out.append(r.json()["output_ids"])
    return out


def _stop(process: subprocess.Popen) -> None:
    """Kill the node's whole process group (its ranks too) if anything is left."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def test_two_nodes_on_localhost_serve_what_one_rank_serves(tiny_llama_dir: str) -> None:
    with make_engine(tiny_llama_dir, device="cpu") as single:
        expected = [o["output_ids"] for o in single.generate(PROMPTS, GREEDY)]
    with _second_node(tiny_llama_dir) as (node1, addr):
        with _start_first_node(tiny_llama_dir, addr) as server:
            assert _generate(server.url) == expected
            info = requests.get(f"{server.url}/get_server_info", timeout=30).json()
            assert info["tp_size"] == 2 and info["nnodes"] == 2
        # node 0 told its ranks to stop: the second node's process ends by itself, cleanly
        assert node1.wait(EXIT_TIMEOUT_S) == 0


def test_a_dead_second_node_takes_the_server_down(tiny_llama_dir: str) -> None:
    with _second_node(tiny_llama_dir) as (node1, addr):
        with _start_first_node(tiny_llama_dir, addr) as server:
            _generate(server.url)
            _stop(node1)  # the whole second machine, as far as node 0 can tell
            # the next batch finds the group broken: the client gets an error, the server stops
            try:
                r = requests.post(
                    f"{server.url}/generate", json={"text": "hi", "sampling_params": GREEDY}, timeout=120
                )
                assert r.status_code >= 500
            except requests.ConnectionError:
                pass
            server.process.wait(EXIT_TIMEOUT_S)


def test_a_killed_first_node_ends_the_second(tiny_llama_dir: str) -> None:
    with _second_node(tiny_llama_dir) as (node1, addr):
        server = _start_first_node(tiny_llama_dir, addr)
        try:
            _generate(server.url)
            server.process.kill()  # node 0 gone at once: its rank 0 follows its parent out
        finally:
            server.shutdown()
        # rank 1, idle in its wait for the next batch, sees the group break and exits with an error
        assert node1.wait(EXIT_TIMEOUT_S) != 0


@pytest.mark.parametrize(
    "flags, named",
    [
        (dict(tp_size=3, nnodes=2, dist_init_addr="127.0.0.1:1234"), "nnodes"),
        (dict(tp_size=2, nnodes=2, node_rank=2, dist_init_addr="127.0.0.1:1234"), "node_rank"),
        (dict(tp_size=2, nnodes=2, node_rank=-1, dist_init_addr="127.0.0.1:1234"), "node_rank"),
        (dict(tp_size=2, nnodes=2), "dist_init_addr"),
        (dict(tp_size=2, nnodes=2, dist_init_addr="127.0.0.1"), "dist_init_addr"),
        (dict(tp_size=2, nnodes=2, dist_init_addr="127.0.0.1:http"), "dist_init_addr"),
        (dict(tp_size=2, nnodes=0), "nnodes"),
        (dict(tp_size=2, node_rank=1), "node_rank"),
    ],
)
def test_inconsistent_flags_are_refused_naming_the_flag(flags: dict, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        ServerArgs(**flags)


def test_the_cli_refuses_inconsistent_flags_before_starting_anything(tiny_llama_dir: str) -> None:
    cmd = [
        sys.executable,
        "-m",
        "radixlm.runtime.server.serve_cli",
        "--model",
        tiny_llama_dir,
        "--tp-size",
        "3",
        "--nnodes",
        "2",
        "--node-rank",
        "1",
        "--dist-init-addr",
        "127.0.0.1:1",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert done.returncode != 0
    assert "tp_size 3 must be a multiple of nnodes 2" in done.stderr


def test_the_engine_refuses_to_be_a_later_node(tiny_llama_dir: str) -> None:
    with pytest.raises(ValueError, match="node_rank"):
        Engine(
            model=tiny_llama_dir,
            device="cpu",
            tp_size=2,
            nnodes=2,
            node_rank=1,
            dist_init_addr="127.0.0.1:1234",
        )
