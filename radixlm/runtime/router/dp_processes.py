"""Start a data-parallel server's children: N scheduler replicas (each may be tensor parallel), the
controller that routes between them, and the detokenizer."""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from radixlm._env import huge_page_malloc_in_children
from radixlm.runtime.detokenizer.process import run_detokenizer_process
from radixlm.runtime.ipc import IpcAddrs, IpcDir
from radixlm.runtime.router.dp_controller import run_dp_controller
from radixlm.runtime.scheduler.process import run_scheduler_process
from radixlm.runtime.server.processes import STARTUP_POLL_S, STOP_TIMEOUT_S, RuntimeProcesses, tokenizer_path


@dataclass
class DataParallelProcesses(RuntimeProcesses):
    """``scheduler`` is the controller here; ``replicas`` are the scheduler processes behind it."""

    replicas: list[Any] = field(default_factory=list)

    def dead_child(self) -> str | None:
        for i, proc in enumerate(self.replicas):
            if proc.exitcode is not None:
                return f"data-parallel replica {i} exited unexpectedly (exit code {proc.exitcode})"
        return super().dead_child()

    def shutdown(self) -> None:
        for proc in self.replicas:
            if proc.is_alive():
                proc.terminate()
        for proc in self.replicas:
            proc.join(STOP_TIMEOUT_S)
            if proc.is_alive():
                proc.kill()
                proc.join()
        super().shutdown()


def start_dp_processes(
    server_args: Any, thread_env: dict[str, str | None], scheduler_factory: Callable[[Any], Any] | None = None
) -> DataParallelProcesses:
    """Start ``dp_size`` replicas (waiting until each loaded its model), the controller and the
    detokenizer. Raises ``RuntimeError`` with a replica's traceback when one cannot start."""
    ctx = mp.get_context("spawn")
    ipc_dir = IpcDir()
    addrs = ipc_dir.addrs()
    n = server_args.dp_size
    inboxes = [f"ipc://{os.path.join(ipc_dir.path, f'replica-{i}-in')}" for i in range(n)]
    outboxes = [f"ipc://{os.path.join(ipc_dir.path, f'replica-{i}-out')}" for i in range(n)]
    procs = DataParallelProcesses(ipc_dir, addrs, None, None, {})
    try:
        waits = []
        for i in range(n):
            ready_recv, ready_send = ctx.Pipe(duplex=False)
            replica_addrs = IpcAddrs(addrs.directory, inboxes[i], outboxes[i], addrs.tokenizer_manager)
            proc = ctx.Process(
                target=run_scheduler_process,
                name=f"radixlm-scheduler-dp{i}",
                daemon=True,
                args=(server_args, replica_addrs, os.getpid(), ready_send, thread_env, scheduler_factory),
            )
            with huge_page_malloc_in_children(server_args.quantization):
                proc.start()
            ready_send.close()
            procs.replicas.append(proc)
            waits.append(ready_recv)
        for i, (proc, ready_recv) in enumerate(zip(procs.replicas, waits)):
            procs.model_info = _wait_ready(i, proc, ready_recv)
        procs.scheduler = ctx.Process(
            target=run_dp_controller,
            name="radixlm-dp-controller",
            daemon=True,
            args=(
                server_args,
                addrs.scheduler,
                inboxes,
                outboxes,
                addrs.detokenizer,
                os.getpid(),
                addrs.directory,
            ),
        )
        procs.scheduler.start()
        procs.detokenizer = ctx.Process(
            target=run_detokenizer_process,
            name="radixlm-detokenizer",
            daemon=True,
            args=(tokenizer_path(procs.model_info), addrs, os.getpid()),
        )
        procs.detokenizer.start()
    except BaseException:
        procs.shutdown()
        raise
    return procs


def _wait_ready(i: int, proc: Any, ready_recv: Any) -> dict[str, Any]:
    while not ready_recv.poll(STARTUP_POLL_S):
        if proc.exitcode is not None:
            raise RuntimeError(f"data-parallel replica {i} exited during startup (exit code {proc.exitcode})")
    try:
        status, payload = ready_recv.recv()
    except EOFError as e:
        raise RuntimeError(f"data-parallel replica {i} exited during startup") from e
    if status != "ready":
        raise RuntimeError(f"data-parallel replica {i} failed to start:\n{payload}")
    return payload
