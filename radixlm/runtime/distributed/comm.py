"""The tensor-parallel process group of this process (``torch.distributed``'s default group): gloo on
CPU, NCCL on CUDA. One group per process, so one tensor-parallel model per process."""

from __future__ import annotations

import datetime
import socket

import torch
import torch.distributed as dist

# NOTE: an idle rank waits in a broadcast for the next batch, possibly for days; a dead peer ends
# that wait at once (its socket closes), so the long timeout never delays a failure.
IDLE_TIMEOUT = datetime.timedelta(days=30)
STARTUP_TIMEOUT = datetime.timedelta(minutes=10)
LEAVE_TIMEOUT = datetime.timedelta(seconds=30)

_store: dist.TCPStore | None = None  # the rendezvous store (rank 0 hosts it), kept for the leaving


def free_local_addr() -> str:
    """``127.0.0.1:<a free port>`` for a single-node rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def init_group(addr: str, rank: int, world_size: int, device: torch.device) -> None:
    """Join the group at ``addr`` (``host:port``; rank 0 hosts the store there)."""
    if dist.is_initialized():
        raise RuntimeError(
            "this process already belongs to a tensor-parallel group: one "
            "tensor-parallel engine per process (shut the other one down first)"
        )
    global _store
    host, port = addr.rsplit(":", 1)
    _store = store = dist.TCPStore(host, int(port), world_size, is_master=rank == 0, timeout=STARTUP_TIMEOUT)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=IDLE_TIMEOUT)


def destroy_group(wait_for_ranks: bool = False) -> None:
    """Leave the group. Ranks > 0 say so in the store once they have; rank 0, with
    ``wait_for_ranks`` (every rank was told to stop), waits up to ``LEAVE_TIMEOUT`` for that before
    its process may end, since ending closes the store and the sockets of a rank still leaving
    (under load such a rank aborted in its teardown)."""
    global _store
    if not dist.is_initialized():
        return
    rank, size = dist.get_rank(), dist.get_world_size()
    dist.destroy_process_group()
    store, _store = _store, None
    if store is None:
        return
    try:
        if rank > 0:
            store.set(f"left/{rank}", "1")
        elif wait_for_ranks:
            store.wait([f"left/{r}" for r in range(1, size)], LEAVE_TIMEOUT)
    except Exception:  # rank 0 already gone, or a rank that never says: nothing left to wait for
        pass


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def all_reduce(t: torch.Tensor) -> torch.Tensor:
    """Sum ``t`` over the ranks, in place; returns it."""
    if dist.is_initialized():
        dist.all_reduce(t)
    return t


def all_reduce_max(t: torch.Tensor) -> torch.Tensor:
    """The elementwise max of ``t`` over the ranks, in place; returns it."""
    if dist.is_initialized():
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t


def agree_min(value: int, device: torch.device) -> int:
    """The smallest ``value`` any rank passes (so every rank sizes its KV pool alike)."""
    t = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return int(t.item())


def broadcast(t: torch.Tensor) -> torch.Tensor:
    """Rank 0's ``t`` on every rank, in place."""
    dist.broadcast(t, src=0)
    return t


def gather_last_dim(t: torch.Tensor) -> torch.Tensor | None:
    """On rank 0 the ranks' ``t`` concatenated along the last axis (rank order); None elsewhere."""
    t = t.contiguous()
    if dist.get_rank() == 0:
        parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
        dist.gather(t, parts, dst=0)
        return torch.cat(parts, dim=-1)
    dist.gather(t, None, dst=0)
    return None
