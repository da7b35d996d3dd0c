"""Start and stop the server's child processes: the scheduler and the detokenizer."""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from radixlm._env import huge_page_malloc_in_children
from radixlm.runtime.detokenizer.process import run_detokenizer_process
from radixlm.runtime.ipc import IpcAddrs, IpcDir
from radixlm.runtime.scheduler.process import run_scheduler_process

STARTUP_POLL_S = 0.5
STOP_TIMEOUT_S = 5.0


@dataclass
class RuntimeProcesses:
    """The running children, their socket directory and what the scheduler reported at startup."""

    ipc_dir: IpcDir
    addrs: IpcAddrs
    scheduler: Any  # multiprocessing.Process
    detokenizer: Any | None
    model_info: dict[str, Any]

    def dead_child(self) -> str | None:
        """A message naming the first child that exited, or None while both run."""
        for name, proc in (("scheduler", self.scheduler), ("detokenizer", self.detokenizer)):
            if proc is not None and proc.exitcode is not None:
                return f"the {name} process exited unexpectedly (exit code {proc.exitcode})"
        return None

    def shutdown(self) -> None:
        """Stop both children (terminate, then kill) and remove the socket directory."""
        procs = [p for p in (self.scheduler, self.detokenizer) if p is not None]
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        for proc in procs:
            proc.join(STOP_TIMEOUT_S)
            if proc.is_alive():
                proc.kill()
                proc.join()
        self.ipc_dir.close()


def start_processes(
    server_args: Any,
    thread_env: dict[str, str | None],
    scheduler_factory: Callable[[Any], Any] | None = None,
    while_loading: Callable[[], None] | None = None,
) -> RuntimeProcesses:
    """Start the scheduler and the detokenizer together, run ``while_loading()`` (the server's own
    imports) while the scheduler loads its model, wait until it is loaded, then send the detokenizer
    the tokenizer's path it reported.

    Raises ``RuntimeError`` with the child's traceback when the scheduler cannot start.
    """
    ctx = mp.get_context("spawn")
    ipc_dir = IpcDir()
    addrs = ipc_dir.addrs()
    ready_recv, ready_send = ctx.Pipe(duplex=False)
    path_recv, path_send = ctx.Pipe(duplex=False)
    scheduler = ctx.Process(
        target=run_scheduler_process,
        args=(server_args, addrs, os.getpid(), ready_send, thread_env, scheduler_factory),
        name="radixlm-scheduler",
        daemon=True,
    )
    detokenizer = ctx.Process(
        target=run_detokenizer_process,
        args=(path_recv, addrs, os.getpid()),
        name="radixlm-detokenizer",
        daemon=True,
    )
    procs = RuntimeProcesses(ipc_dir, addrs, scheduler, None, {})
    try:
        with huge_page_malloc_in_children(server_args.quantization):
            scheduler.start()
        ready_send.close()
        detokenizer.start()
        procs.detokenizer = detokenizer
        path_recv.close()
        if while_loading is not None:
            while_loading()
        while not ready_recv.poll(STARTUP_POLL_S):
            if scheduler.exitcode is not None:
                raise RuntimeError(_exited_during_startup(scheduler))
        try:
            status, payload = ready_recv.recv()
        except EOFError as e:
            scheduler.join(STOP_TIMEOUT_S)
            raise RuntimeError(_exited_during_startup(scheduler)) from e
        if status != "ready":
            raise RuntimeError(f"the scheduler failed to start:\n{payload}")
        procs.model_info = payload
        path_send.send(tokenizer_path(payload))
    except BaseException:
        procs.shutdown()
        raise
    finally:
        path_send.close()
    return procs


def tokenizer_path(model_info: dict[str, Any]) -> str:
    """Where the served model's tokenizer files are on this machine."""
    return model_info.get("local_tokenizer_path") or model_info["local_model_path"]


def _exited_during_startup(scheduler: Any) -> str:
    return f"the scheduler process exited during startup (exit code {scheduler.exitcode})"
