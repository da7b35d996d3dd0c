"""The scheduler child process: drives a ``Scheduler`` object from ZeroMQ messages."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import zmq

from radixlm import _env  # noqa: F401  (sets OMP_WAIT_POLICY before torch is imported)
from radixlm.runtime.ipc import IpcAddrs, recv_all, watch_parent, zmq_socket

IDLE_POLL_MS = 200  # how long an idle scheduler blocks waiting for the next message
HEARTBEAT_S = 1.0  # how often the loop tells the server it is alive


def run_scheduler_process(
    server_args: Any,
    addrs: IpcAddrs,
    parent_pid: int,
    ready: Connection,
    thread_env: dict[str, str | None],
    scheduler_factory: Callable[[Any], Any] | None = None,
) -> None:
    """Entry point (multiprocessing spawn): load the model, report ``("ready", model_info)`` or
    ``("error", traceback)`` on ``ready``, then loop until the parent stops it or dies.

    ``scheduler_factory(server_args)`` builds the scheduler (default: the real ``Scheduler``); tests
    pass a fake. This process owns the compute threads: ``thread_env`` restores the thread
    variables the server had before it limited its own (applied before numpy or torch load).
    """
    for name, value in thread_env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    from radixlm.runtime.messages import SchedulerDied

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    watch_parent(parent_pid, addrs.directory)
    ctx = zmq.Context()
    pull = zmq_socket(ctx, zmq.PULL, addrs.scheduler, bind=True)
    push = zmq_socket(ctx, zmq.PUSH, addrs.detokenizer, bind=False)
    try:
        from radixlm.runtime.distributed.tensor_parallel import exit_on_rank_death, stop_on_sigterm

        factory = scheduler_factory
        if factory is None:
            from radixlm.runtime.scheduler.scheduler import Scheduler

            factory = Scheduler
        scheduler = factory(server_args)
        exit_on_rank_death(getattr(scheduler, "runner", None))
        stop = stop_on_sigterm(getattr(scheduler, "runner", None))
        ready.send(("ready", scheduler.model_info()))
    except Exception:
        ready.send(("error", traceback.format_exc()))
        return
    try:
        import torch

        with torch.inference_mode():
            serve_forever(scheduler, pull, push, stop)
        scheduler.shutdown()  # only after a stop: rank 0 tells every rank, on every node, to exit
    except Exception:
        # NOTE: the server prints the traceback it receives; exit quietly with status 1.
        push.send_pyobj(SchedulerDied("scheduler", traceback.format_exc()))
        push.close(linger=2000)  # deliver the notice before exiting
        sys.exit(1)


def serve_forever(scheduler: Any, pull: Any, push: Any, stop: threading.Event | None = None) -> None:
    """Receive -> handle -> step -> send, until ``stop`` is set (checked between steps). Polls
    without waiting while there is work."""
    from radixlm.runtime.messages import BatchTokenOut, Heartbeat

    last_beat = 0.0
    while stop is None or not stop.is_set():
        for msg in recv_all(pull, timeout_ms=0 if scheduler.has_work() else IDLE_POLL_MS):
            reply = scheduler.handle(msg)  # a request whose intake fails is failed alone
            if reply is not None:
                push.send_pyobj(reply)
        outs = scheduler.step()
        if outs:
            push.send_pyobj(BatchTokenOut(outs))
        for reply in getattr(scheduler, "take_replies", list)():  # embeddings answered this step
            push.send_pyobj(reply)
        if time.monotonic() - last_beat >= HEARTBEAT_S:  # /health: the loop still turns
            last_beat = time.monotonic()
            push.send_pyobj(Heartbeat(last_beat))
