"""llama.cpp as the peer of ``cpu_speed.py``: llama-cpp-python in a venv cached under RADIXLM_CACHE,
installed on first use (its C++ build takes ~15 minutes on 2 cores), and its OpenAI-compatible
server (``python -m llama_cpp.server``) started and stopped like ``radixlm serve``."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import venv
from dataclasses import dataclass
from pathlib import Path

import httpx

VERSION = "0.3.36"


def cache_dir() -> Path:
    return Path(os.environ.get("RADIXLM_CACHE") or Path.home() / ".cache" / "radixlm")


def venv_python(version: str = VERSION) -> Path:
    return cache_dir() / "venvs" / f"llama-cpp-python-{version}" / "bin" / "python"


def _importable(python: Path) -> bool:
    if not python.exists():
        return False
    probe = subprocess.run([str(python), "-c", "import llama_cpp.server"], capture_output=True)
    return probe.returncode == 0


def ensure_llama_cpp(version: str = VERSION) -> Path:
    """The venv's python with ``llama-cpp-python[server]`` importable; installs it when missing."""
    python = venv_python(version)
    if _importable(python):
        return python
    root = python.parent.parent
    print(f"installing llama-cpp-python[server]=={version} into {root} (builds llama.cpp: ~15 min)",
          file=sys.stderr, flush=True)
    if not python.exists():
        venv.create(root, with_pip=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet",
                    f"llama-cpp-python[server]=={version}"], check=True)
    if not _importable(python):
        raise RuntimeError(f"llama-cpp-python did not install into {root}")
    return python


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PeerServer:
    process: subprocess.Popen
    url: str
    log_path: str

    def shutdown(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def launch_llama_cpp_server(gguf: str, threads: int, n_ctx: int = 4096,
                            timeout: float = 300.0) -> PeerServer:
    """``python -m llama_cpp.server`` on ``gguf`` with ``threads`` threads; waits for ``/v1/models``."""
    python = ensure_llama_cpp()
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="llama-cpp-server-", suffix=".log", delete=False)
    cmd = [str(python), "-m", "llama_cpp.server", "--model", gguf, "--host", "127.0.0.1",
           "--port", str(port), "--n_threads", str(threads), "--n_threads_batch", str(threads),
           "--n_ctx", str(n_ctx),
           # by default a new request interrupts the one streaming: queue them instead
           "--interrupt_requests", "False"]
    process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    log.close()
    server = PeerServer(process, f"http://127.0.0.1:{port}", log.name)
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(f"{server.url}/v1/models", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            server.shutdown()
            raise RuntimeError(f"llama_cpp.server did not start; see {log.name}")
        time.sleep(0.5)
