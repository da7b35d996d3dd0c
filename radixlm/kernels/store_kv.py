"""Write the new tokens' K and V into the KV pool at their slots."""
from __future__ import annotations

import torch


def store_kv_torch(k_buffer: torch.Tensor, v_buffer: torch.Tensor, loc: torch.Tensor,
                   k: torch.Tensor, v: torch.Tensor) -> None:
    """``k_buffer[loc] = k`` and ``v_buffer[loc] = v``; ``k``/``v`` are ``[T, Hkv, D]``."""
    k_buffer[loc] = k.to(k_buffer.dtype)
    v_buffer[loc] = v.to(v_buffer.dtype)


def store_kv(k_buffer: torch.Tensor, v_buffer: torch.Tensor, loc: torch.Tensor,
             k: torch.Tensor, v: torch.Tensor) -> None:
    """Dispatch point: the torch reference everywhere (an indexed copy is already one kernel)."""
    store_kv_torch(k_buffer, v_buffer, loc, k, v)
