"""llama.cpp as the peer of ``cpu_speed.py``, started and stopped like ``radixlm serve``:

- llama-cpp-python in a venv cached under RADIXLM_CACHE, installed on first use (its C++ build takes
  ~15 minutes on 2 cores), and its OpenAI-compatible server (``python -m llama_cpp.server``);
- llama.cpp's native ``llama-server`` (continuous batching over ``--parallel`` slots), built on first
  use from the llama.cpp sources vendored in the same llama-cpp-python version's sdist (``pip
  download --no-binary``), CPU only, into RADIXLM_CACHE/llama-server (~15 more minutes).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tarfile
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
    print(
        f"installing llama-cpp-python[server]=={version} into {root} (builds llama.cpp: ~15 min)",
        file=sys.stderr,
        flush=True,
    )
    if not python.exists():
        venv.create(root, with_pip=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", f"llama-cpp-python[server]=={version}"], check=True
    )
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


def launch_llama_cpp_server(gguf: str, threads: int, n_ctx: int = 4096, timeout: float = 300.0) -> PeerServer:
    """``python -m llama_cpp.server`` on ``gguf`` with ``threads`` threads; waits for ``/v1/models``."""
    python = ensure_llama_cpp()
    port = free_port()
    cmd = [
        str(python),
        "-m",
        "llama_cpp.server",
        "--model",
        gguf,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_threads",
        str(threads),
        "--n_threads_batch",
        str(threads),
        "--n_ctx",
        str(n_ctx),
        # by default a new request interrupts the one streaming: queue them instead
        "--interrupt_requests",
        "False",
    ]
    return _start(cmd, port, "/v1/models", timeout)


def _start(cmd: list[str], port: int, ready_path: str, timeout: float) -> PeerServer:
    """Run ``cmd`` (a server on ``port``) with its output in a log file; wait until ``ready_path``
    answers 200."""
    log = tempfile.NamedTemporaryFile(prefix=f"{Path(cmd[0]).name}-", suffix=".log", delete=False)
    process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    log.close()
    server = PeerServer(process, f"http://127.0.0.1:{port}", log.name)
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(f"{server.url}{ready_path}", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            server.shutdown()
            raise RuntimeError(f"{' '.join(cmd[:3])} did not start; see {log.name}")
        time.sleep(0.5)


def native_server_binary(version: str = VERSION) -> Path:
    return cache_dir() / "llama-server" / f"build-{version}" / "bin" / "llama-server"


def ensure_native_server(version: str = VERSION) -> Path:
    """``llama-server`` built from the vendored llama.cpp of llama-cpp-python ``version``'s sdist."""
    binary = native_server_binary(version)
    if binary.exists():
        return binary
    if shutil.which("cmake") is None:
        raise RuntimeError("building llama-server needs cmake on PATH (pip install cmake)")
    root = binary.parent.parent.parent
    sdist_dir = root / "sdist"
    sdist_dir.mkdir(parents=True, exist_ok=True)
    print(
        f"building llama-server from llama-cpp-python=={version}'s vendored llama.cpp into {root} (~15 min)",
        file=sys.stderr,
        flush=True,
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            "llama-cpp-python",  # not :all:, which also builds the build tools (cmake) from source
            f"llama-cpp-python=={version}",
            "-d",
            str(sdist_dir),
        ],
        check=True,
    )
    archive = sdist_dir / f"llama_cpp_python-{version}.tar.gz"
    with tarfile.open(archive) as tar:
        tar.extractall(sdist_dir, filter="data")
    source = sdist_dir / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
    build = binary.parent.parent
    subprocess.run(
        [
            "cmake",
            "-S",
            str(source),
            "-B",
            str(build),
            "-DCMAKE_BUILD_TYPE=Release",
            "-DLLAMA_CURL=OFF",
            "-DLLAMA_OPENSSL=OFF",
            "-DLLAMA_BUILD_TESTS=OFF",
            "-DLLAMA_BUILD_EXAMPLES=OFF",
            "-DLLAMA_BUILD_TOOLS=ON",
            "-DGGML_NATIVE=ON",
            "-DBUILD_SHARED_LIBS=OFF",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    jobs = str(os.cpu_count() or 2)
    subprocess.run(
        ["cmake", "--build", str(build), "--target", "llama-server", "-j", jobs],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    if not binary.exists():
        raise RuntimeError(f"llama-server was not built at {binary}")
    return binary


def launch_native_server(
    gguf: str, threads: int, parallel: int = 8, n_ctx: int = 4096, timeout: float = 300.0
) -> PeerServer:
    """``llama-server`` on ``gguf`` with ``threads`` threads and ``parallel`` slots sharing ``n_ctx``
    tokens of context per slot; waits for ``/health``."""
    binary = ensure_native_server()
    port = free_port()
    cmd = [
        str(binary),
        "--model",
        gguf,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--threads",
        str(threads),
        "--threads-batch",
        str(threads),
        "--parallel",
        str(parallel),
        "--ctx-size",
        str(n_ctx * parallel),
        "--no-webui",
    ]
    return _start(cmd, port, "/health", timeout)
