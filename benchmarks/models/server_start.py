"""Time ``radixlm serve`` from launch to its first ``/health`` 200 and to its first completion (one
token of ``/generate``), each of ``--runs`` fresh server processes, and print the medians with the
box's load average. The server log's stamped phases (``--log-level info``) are printed for the last run.

    python -m benchmarks.models.server_start /tmp/llama-1.5b-q4_0.gguf [--runs 3] [--threads 2]

Run it with the checkout on ``PYTHONPATH`` (the server child inherits it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from radixlm.runtime.server.launch import free_port

POLL_S = 0.02


def _get_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _generate(url: str) -> None:
    body = json.dumps({"text": "Hello", "sampling_params": {"max_new_tokens": 1}}).encode()
    request = urllib.request.Request(url + "/generate", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as resp:
        resp.read()


def one_start(model: str, threads: int) -> tuple[float, float, str]:
    """Seconds from ``Popen`` to the first healthy ``/health`` and to the first completion, and the log."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "radixlm.cli", "serve", "--model", model, "--port", str(port)]
    argv += ["--num-threads", str(threads), "--log-level", "info", "--disable-web-ui"]
    with tempfile.TemporaryFile("w+") as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
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
    args = ap.parse_args()
    healthy, first = [], []
    log = ""
    for i in range(args.runs):
        h, f, log = one_start(args.model, args.threads)
        healthy.append(h)
        first.append(f)
        print(f"run {i + 1}: /health {h:.2f} s, first completion {f:.2f} s, load {os.getloadavg()[0]:.1f}")
    h, f = statistics.median(healthy), statistics.median(first)
    print(f"median: /health {h:.2f} s, first completion {f:.2f} s")
    print("last run's log:\n" + log[-3000:])


if __name__ == "__main__":
    main()
