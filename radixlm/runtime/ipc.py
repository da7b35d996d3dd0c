"""Inter-process plumbing of the server: a private socket directory, ZeroMQ sockets, parent watch.

Topology (ZeroMQ PUSH/PULL over ``ipc://``; every arrow is one socket pair):

    TokenizerManager --(requests)--> Scheduler --(tokens, replies)--> Detokenizer
    Detokenizer --(text, replies)--> TokenizerManager

Replies of the scheduler (flush, stats) and a child's death notice travel the same path, so the
TokenizerManager reads exactly one socket.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any

import zmq


@dataclass(frozen=True)
class IpcAddrs:
    """The ``ipc://`` endpoint each process binds for its input (PULL) socket."""

    directory: str
    scheduler: str
    detokenizer: str
    tokenizer_manager: str


class IpcDir:
    """A private (0700) temporary directory holding the socket files; ``close()`` removes it."""

    def __init__(self) -> None:
        # mkdtemp creates the directory with mode 0700.
        self.path = tempfile.mkdtemp(prefix=f"radixlm-ipc-{os.getpid()}-")
        os.chmod(self.path, 0o700)

    def addrs(self) -> IpcAddrs:
        def addr(name: str) -> str:
            return f"ipc://{os.path.join(self.path, name)}"

        return IpcAddrs(self.path, addr("scheduler"), addr("detokenizer"), addr("tokenizer_manager"))

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def zmq_socket(ctx: zmq.Context, kind: int, addr: str, bind: bool) -> zmq.Socket:
    """A PUSH or PULL socket with no linger (a dead peer never blocks shutdown) and no HWM limit."""
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    (sock.bind if bind else sock.connect)(addr)
    return sock


def recv_all(sock: zmq.Socket, timeout_ms: int) -> list[Any]:
    """Every message waiting on ``sock``; waits up to ``timeout_ms`` for the first (0: no wait)."""
    msgs: list[Any] = []
    if timeout_ms > 0 and not sock.poll(timeout_ms, zmq.POLLIN):
        return msgs
    while True:
        try:
            msgs.append(sock.recv_pyobj(zmq.NOBLOCK))
        except zmq.Again:
            return msgs


def watch_parent(parent_pid: int, socket_dir: str, interval_s: float = 0.5) -> threading.Thread:
    """Exit this process at once when ``parent_pid`` is gone, so a killed server leaves no orphans.

    The socket directory is removed first: a parent killed outright could not remove it itself.
    """

    def watch() -> None:
        while True:
            time.sleep(interval_s)
            if os.getppid() != parent_pid or not _alive(parent_pid):
                shutil.rmtree(socket_dir, ignore_errors=True)
                os._exit(1)

    thread = threading.Thread(target=watch, name="watch-parent", daemon=True)
    thread.start()
    return thread


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
