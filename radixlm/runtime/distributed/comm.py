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
    host, port = addr.rsplit(":", 1)
    store = dist.TCPStore(host, int(port), world_size, is_master=rank == 0, timeout=STARTUP_TIMEOUT)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=IDLE_TIMEOUT)


def destroy_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


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
