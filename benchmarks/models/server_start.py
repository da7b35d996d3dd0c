"""Time ``radixlm serve`` from launch to its first ``/health`` 200 and to its first completion (one
token of ``/generate``), over ``--runs`` rounds of fresh server processes, and print the medians with
the box's load average. Each round starts every side once, alternating: this checkout, each
``--checkout DIR`` (another tree's radixlm on the server's ``PYTHONPATH``, e.g. an older commit's
``git archive``), and with ``--llama-server`` llama.cpp's server on the same file. The server log's
stamped phases (``--log-level info``) are printed for the last run of this checkout.

    python -m benchmarks.models.server_start /tmp/llama-1.5b-q4_0.gguf [--runs 3] [--threads 2] \
        [--checkout /tmp/startup-base] [--llama-server]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from radixlm.runtime.server.launch import free_port

POLL_S = 0.02


def _get_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _generate(url: str) -> None:
    body = json.dumps({"prompt": "Hello", "max_tokens": 1}).encode()  # OpenAI's: both servers answer it
    request = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as resp:
        resp.read()


def _radixlm_argv(model: str, threads: int, port: int) -> list[str]:
    argv = [sys.executable, "-m", "radixlm.cli", "serve", "--model", model, "--port", str(port)]
    return argv + ["--num-threads", str(threads), "--log-level", "info", "--disable-web-ui"]


def _llama_server_argv(model: str, threads: int, port: int) -> list[str]:
    from benchmarks.peers.llama_cpp_peer import ensure_native_server

    argv = [str(ensure_native_server()), "--model", model, "--host", "127.0.0.1", "--port", str(port)]
    return argv + ["--threads", str(threads), "--threads-batch", str(threads), "--no-webui"]


def one_start(argv_for: Callable[[int], list[str]], env: dict[str, str]) -> tuple[float, float, str]:
    """Seconds from ``Popen`` to the first healthy ``/health`` and to the first completion, and the log."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile("w+") as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            argv_for(port), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
        try:
            while not _get_ok(url + "/health"):
                if proc.poll() is not None:
                    log.seek(0)
                    raise RuntimeError(f"server exited:\n{log.read()[-4000:]}")
                time.sleep(POLL_S)
            healthy = time.perf_counter() - t0
            _generate(url)
            first = time.perf_counter() - t0
        finally:
            proc.terminate()
            proc.wait(30)
        log.seek(0)
        return healthy, first, log.read()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--checkout", action="append", default=[], help="another radixlm tree to time too")
    ap.add_argument("--llama-server", action="store_true", help="time llama.cpp's llama-server too")
    args = ap.parse_args()
    here = str(Path(__file__).resolve().parents[2])
    sides: dict[str, tuple[Callable[[int], list[str]], dict[str, str]]] = {}
    for tree in [here, *args.checkout]:
        env = {**os.environ, "PYTHONPATH": tree}
        sides[f"radixlm {tree}"] = (functools.partial(_radixlm_argv, args.model, args.threads), env)
    if args.llama_server:
        sides["llama-server"] = (
            functools.partial(_llama_server_argv, args.model, args.threads),
            dict(os.environ),
        )
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    log = ""
    for i in range(args.runs):
        for name, (argv_for, env) in sides.items():
            h, f, side_log = one_start(argv_for, env)
            log = side_log if name == f"radixlm {here}" else log
            times[name].append((h, f))
            print(f"round {i + 1} {name}: /health {h:.2f} s, first completion {f:.2f} s, load {_load()}")
    for name, pairs in times.items():
        h, f = statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)
        print(f"median {name}: /health {h:.2f} s, first completion {f:.2f} s")
    print("this checkout's last log:\n" + log[-3000:])


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


if __name__ == "__main__":
    main()
