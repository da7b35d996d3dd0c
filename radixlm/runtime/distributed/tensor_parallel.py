"""A model runner's tensor-parallel side: rank 0 starts the other ranks of its node (one process each),
joins their group, broadcasts every batch and gathers the logits; ranks > 0 run ``serve_rank``.

Design: one scheduler (rank 0's) decides every batch and broadcasts it. The other ranks own their
share of the weights and of the KV pool (their KV heads, the same slot indices), but no scheduler:
the radix tree, the KV allocator, the grammar state and the sampler exist once, so they cannot drift.
The logits are gathered on rank 0 (vocabulary slices, concatenated), where sampling with grammar
masks, penalties and logprobs runs as without parallelism.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from radixlm._env import weight_process_env
from radixlm.runtime.distributed import comm
from radixlm.runtime.distributed.batch_broadcast import recv_batch, send_batch, send_lora, send_stop
from radixlm.runtime.distributed.partition import TPShard
from radixlm.runtime.distributed.shard_llama import shard_llama
from radixlm.runtime.executor.forward_batch import ForwardBatch
from radixlm.runtime.quantization.methods import QUANTIZATION_METHODS

logger = logging.getLogger(__name__)
WATCH_INTERVAL_S = 0.5
STOP_TIMEOUT_S = 10.0


class TensorParallel:
    """This process's rank: its shard, the processes it started (rank 0 of each node) and the group."""

    def __init__(self, server_args: Any, rank: int, device: torch.device) -> None:
        self.shard = TPShard(rank, server_args.tp_size)
        self.device = device
        self.workers: list[subprocess.Popen] = []
        self.dead: str | None = None
        self.on_rank_death: Callable[[str], None] | None = None
        addr = server_args.dist_init_addr or comm.free_local_addr()
        self.addr = addr
        if rank == 0:
            self.workers = start_node_ranks(server_args.replace(dist_init_addr=addr), first_rank=1)
            self._join_group_watching(server_args.tp_size)
            threading.Thread(target=self._watch, name="tp-watch", daemon=True).start()
        else:
            comm.init_group(addr, rank, server_args.tp_size, device)

    def _join_group_watching(self, world_size: int) -> None:
        """Rank 0 joins the group while watching its ranks: one that dies during startup fails the
        start at once instead of after the rendezvous timeout."""
        error: list[BaseException] = []

        def join() -> None:
            try:
                comm.init_group(self.addr, 0, world_size, self.device)
            except BaseException as e:  # handed to the caller
                error.append(e)

        joiner = threading.Thread(target=join, name="tp-join", daemon=True)
        joiner.start()
        while joiner.is_alive():
            joiner.join(WATCH_INTERVAL_S)
            exited = [(i, p.returncode) for i, p in enumerate(self.workers, 1) if p.poll() is not None]
            if exited and joiner.is_alive():
                stop_processes(self.workers)
                self.workers = []
                raise RuntimeError(
                    f"tensor-parallel rank {exited[0][0]} exited during startup (exit code {exited[0][1]})"
                )
        if error:
            stop_processes(self.workers)
            raise RuntimeError(f"tensor-parallel group at {self.addr} failed to form") from error[0]

    @property
    def rank(self) -> int:
        return self.shard.rank

    def shard_model(self, model: torch.nn.Module, quantization: str) -> int:
        """Keep this rank's share of ``model`` (its layers already swapped for ``quantization``);
        returns its KV heads. A model that does not split (heads or sizes not divisible, a quantized
        layer's share not whole blocks) or ranks that resolved ``--quantization`` differently stop
        the other ranks and leave the group before raising."""
        try:
            agree_on_method(quantization, self.device)
            return shard_llama(model, self.shard)
        except BaseException:
            self.dead = "the model could not be sharded"
            if self.rank == 0:
                self.stop()
            else:
                comm.destroy_group()
            raise

    def forward(
        self, model: torch.nn.Module, attn_backend: Any, fb: ForwardBatch, vocab_size: int, lora: Any = None
    ) -> torch.Tensor:
        """Rank 0: send ``fb`` (with ``lora``'s plan and slot changes: a ``LoRAManager``), run this
        rank's part, return the full logits."""
        if self.dead is not None:
            raise RuntimeError(self.dead)
        try:
            send_batch(fb, None if lora is None else lora.take_sync())
            attn_backend.init_forward_metadata(fb)
            logits = comm.gather_last_dim(model(fb))
        except Exception as e:
            # The other ranks are in a collective this rank left (or a rank on another node died and
            # the group broke): nothing more can run on this group.
            self._died(f"tensor-parallel forward failed: {e}")
            raise RuntimeError(self.dead) from e
        assert logits is not None
        return logits[:, :vocab_size]

    def lora_op(self, op: dict) -> bool:
        """Rank 0: have every other rank apply a LoRA load or unload (between batches); whether all
        did. A broken group makes this runner dead, as a failed forward does."""
        if self.dead is not None:
            raise RuntimeError(self.dead)
        try:
            return send_lora(op, self.device)
        except Exception as e:
            self._died(f"tensor-parallel LoRA {op['op']} failed: {e}")
            raise RuntimeError(self.dead) from e

    def _died(self, message: str) -> None:
        """Mark this runner dead and tell ``on_rank_death`` (the server: exit this process)."""
        self.dead = message
        logger.error(message)
        if self.on_rank_death is not None:
            self.on_rank_death(message)

    def stop(self) -> None:
        """Rank 0: stop the other ranks, wait for their processes, leave the group."""
        workers, self.workers = self.workers, []
        told = False
        if self.dead is None and comm.world_size() > 1:
            try:
                send_stop(self.device)
                told = True
            except Exception:  # a rank already gone: its process is reaped below
                logger.warning("could not tell every rank to stop", exc_info=True)
        stop_processes(workers)
        comm.destroy_group(wait_for_ranks=told)

    def status(self) -> list[dict[str, Any]]:
        """Per-rank state for ``get_server_info``."""
        ranks = [{"tp_rank": 0, "pid": os.getpid(), "alive": self.dead is None}]
        for i, p in enumerate(self.workers, start=1):
            ranks.append({"tp_rank": i, "pid": p.pid, "alive": p.poll() is None})
        return ranks

    def _watch(self) -> None:
        """A rank that exits while the group lives makes this runner dead: the others are stopped
        and ``on_rank_death`` (the server: exit this process) is told."""
        while self.workers:
            for i, p in enumerate(list(self.workers), start=1):
                if p.poll() is not None and p in self.workers:
                    message = f"tensor-parallel rank {i} exited (exit code {p.returncode})"
                    self.dead = message  # before the wait below: no new forward may start
                    stop_processes([w for w in self.workers if w is not p])
                    self._died(message)
                    return
            time.sleep(WATCH_INTERVAL_S)


def agree_on_method(method: str, device: torch.device) -> None:
    """Raise unless every rank serves the same quantization (each resolves ``auto`` and kernel
    fallbacks on its own machine; ranks multiplying different numbers would serve garbage)."""
    index = QUANTIZATION_METHODS.index(method)
    low, high = comm.agree_min(index, device), -comm.agree_min(-index, device)
    if low != high:
        raise RuntimeError(
            f"tensor-parallel ranks resolved --quantization differently "
            f"({QUANTIZATION_METHODS[low]} vs {QUANTIZATION_METHODS[high]}); "
            f"give one explicitly that every machine can serve"
        )


def node_ranks(server_args: Any) -> range:
    """The tensor-parallel ranks that run on this node (``tp_size / nnodes`` consecutive ones)."""
    per_node = server_args.tp_size // server_args.nnodes
    return range(server_args.node_rank * per_node, (server_args.node_rank + 1) * per_node)


def local_rank(server_args: Any, rank: int) -> int:
    """``rank``'s index among its node's ranks (which of the node's GPUs it takes)."""
    return rank - node_ranks(server_args).start


def start_node_ranks(server_args: Any, first_rank: int) -> list[subprocess.Popen]:
    """Start this node's ranks from ``first_rank`` on (``python -m ...tp_worker``), one process each."""
    ranks = node_ranks(server_args)
    # The ranks import the same radixlm as this process, wherever it was imported from.
    package_root = str(Path(__file__).resolve().parents[3])  # holds radixlm/
    env = dict(
        weight_process_env(server_args.quantization, os.environ),
        PYTHONPATH=os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p),
    )
    procs = []
    for rank in range(max(first_rank, ranks.start), ranks.stop):
        proc = subprocess.Popen(
            [sys.executable, "-m", "radixlm.runtime.distributed.tp_worker"], stdin=subprocess.PIPE, env=env
        )
        assert proc.stdin is not None
        proc.stdin.write(pickle.dumps((server_args, rank, os.getpid())))
        proc.stdin.close()
        procs.append(proc)
    return procs


def stop_processes(procs: list[subprocess.Popen]) -> None:
    """Wait for ``procs`` a little, then terminate and kill what is left."""
    deadline = time.monotonic() + STOP_TIMEOUT_S / 2
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.terminate()
    for p in procs:
        try:
            p.wait(STOP_TIMEOUT_S / 2)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def serve_rank(runner: Any) -> None:
    """Ranks > 0: run rank 0's batches until it says stop (or its group breaks)."""
    with torch.inference_mode():
        while True:
            fb = recv_batch(runner)
            if fb is None:
                return
            runner.attn_backend.init_forward_metadata(fb)
            comm.gather_last_dim(runner.model(fb))


def exit_on_rank_death(runner: Any) -> None:
    """In a server's scheduler process: a rank that dies ends this process too (after the watcher
    stopped the other ranks), and the server, seeing its scheduler gone, fails pending requests and
    shuts down."""
    tp = getattr(runner, "tp", None)
    if tp is not None:
        tp.on_rank_death = lambda message: os._exit(1)


def run_node(server_args: Any) -> None:
    """``radixlm serve --node-rank k`` (k > 0): run this node's ranks until they exit."""
    procs = start_node_ranks(server_args, first_rank=0)
    try:
        for p in procs:
            p.wait()
    finally:
        stop_processes(procs)
    codes = [p.returncode for p in procs]
    if any(codes):
        raise SystemExit(f"tensor-parallel ranks exited with codes {codes}")


def stop_on_sigterm(runner: Any) -> threading.Event | None:
    """In a server's scheduler process under tensor parallelism: SIGTERM sets the returned event,
    and the scheduler loop stops between steps and closes the runner, so rank 0 tells every rank
    (on every node) to exit. Stopping inside a step would leave the others in a collective."""
    if getattr(runner, "tp", None) is None:
        return None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    return stop
