"""``launch_server``: run the HTTP server as a subprocess from Python (tests, the language's ``Runtime``)."""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any

from radixlm.runtime.server.front_door import resolve_api_key
from radixlm.runtime.server_args import ServerArgs

HEALTH_POLL_S = 0.05
LOG_TAIL_CHARS = 6000


class ServerHandle:
    """A running server subprocess: ``url``, ``shutdown()``, usable as a context manager."""

    def __init__(self, process: subprocess.Popen, url: str, log_path: str, api_key: str | None) -> None:
        self.process = process
        self.url = url
        self.log_path = log_path
        self.api_key = api_key
        atexit.register(self.shutdown)

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        """Everything the server printed so far (stdout and stderr)."""
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def shutdown(self, timeout: float = 20.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; idempotent."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        atexit.unregister(self.shutdown)

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()


def launch_server(
    model: str | None = None,
    port: int | None = None,
    timeout: float = 600.0,
    env: dict[str, str] | None = None,
    **server_args: Any,
) -> ServerHandle:
    """Start ``radixlm serve`` in a subprocess and wait until ``/health`` answers.

    ``port`` None picks a free one; other keyword arguments are ``ServerArgs`` fields (SGLang's
    ``model_path`` names the model too; None is the default model). Raises
    ``RuntimeError`` with the end of the server's log when it exits or does not become healthy.
    """
    args = ServerArgs.from_kwargs(model=model, port=port or free_port(), **server_args)
    api_key = resolve_api_key(args, {**os.environ, **(env or {})}).api_key  # for the health checks
    argv = ["-m", "radixlm.runtime.server.serve_cli", *server_flags(args)]
    return launch_command(argv, f"http://{args.host}:{args.port}", api_key, timeout, env)


def launch_command(
    argv: list[str],
    url: str,
    api_key: str | None = None,
    timeout: float = 600.0,
    env: dict[str, str] | None = None,
) -> ServerHandle:
    """Run ``python *argv`` (a launch line such as ``-m radixlm.launch_server --model-path ...``)
    and wait until ``url``'s ``/health`` answers; raises ``RuntimeError`` like ``launch_server``."""
    log = tempfile.NamedTemporaryFile(prefix="radixlm-server-", suffix=".log", delete=False)
    process = subprocess.Popen(
        [sys.executable, *argv],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    log.close()
    handle = ServerHandle(process, url, log.name, api_key)
    deadline = time.monotonic() + timeout
    while not _healthy(handle):
        if process.poll() is not None or time.monotonic() > deadline:
            exited = process.poll() is not None
            why = f"exited with code {process.returncode}" if exited else f"not healthy after {timeout:.0f} s"
            handle.shutdown()
            raise RuntimeError(
                f"the radixlm server {why}; its log ends with:\n{handle.log()[-LOG_TAIL_CHARS:]}"
            )
        time.sleep(HEALTH_POLL_S)
    return handle


def server_flags(args: ServerArgs) -> list[str]:
    """The ``radixlm serve`` flags that reproduce ``args`` (defaults left out)."""
    defaults = ServerArgs()
    flags: list[str] = []
    for name, value in vars(args).items():
        if value == getattr(defaults, name) or value is None:
            continue
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, tuple):
            flags += [flag, *map(str, value)]
        else:
            flags += [flag, str(value)]
    return flags


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(handle: ServerHandle) -> bool:
    request = urllib.request.Request(handle.url + "/health")
    if handle.api_key:
        request.add_header("Authorization", f"Bearer {handle.api_key}")
    try:
        with urllib.request.urlopen(request, timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False
