"""The detokenizer child process: scheduler tokens in, cumulative text out."""

from __future__ import annotations

import signal
import sys
import traceback
from multiprocessing.connection import Connection

import zmq

from radixlm import _env
from radixlm.runtime.ipc import IpcAddrs, watch_parent, zmq_socket


def run_detokenizer_process(tokenizer_path: str | Connection, addrs: IpcAddrs, parent_pid: int) -> None:
    """Entry point (multiprocessing spawn). Runs until the parent stops it or dies.

    ``tokenizer_path`` is the tokenizer's directory, or a pipe that sends it once the scheduler has
    loaded the model (the server starts this process alongside the scheduler, so its imports overlap
    the model load; a pipe closed unsent means startup failed: the process exits quietly).
    Scheduler replies (flush, stats) and death notices pass through unchanged, so the
    TokenizerManager reads one socket. On its own failure it sends ``SchedulerDied`` and exits.
    """
    _env.limit_threads_for_helper_process()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    watch_parent(parent_pid, addrs.directory)
    from radixlm.runtime.messages import BatchTokenOut, SchedulerDied

    ctx = zmq.Context()
    pull = zmq_socket(ctx, zmq.PULL, addrs.detokenizer, bind=True)
    push = zmq_socket(ctx, zmq.PUSH, addrs.tokenizer_manager, bind=False)
    try:
        from radixlm.runtime.detokenizer.manager import DetokenizerManager
        from radixlm.runtime.weights.tokenizer_files import served_tokenizer

        path = tokenizer_path
        if not isinstance(path, str):
            try:
                path = str(path.recv())
            except EOFError:
                return
        manager = DetokenizerManager(served_tokenizer(path))
        while True:
            msg = pull.recv_pyobj()
            push.send_pyobj(manager.handle(msg) if isinstance(msg, BatchTokenOut) else msg)
    except Exception:
        # NOTE: the server prints the traceback it receives; exit quietly with status 1.
        push.send_pyobj(SchedulerDied("detokenizer", traceback.format_exc()))
        push.close(linger=2000)  # deliver the notice before exiting
        sys.exit(1)
