"""Pick the attention backend named by the server flag ``attention_backend``."""

from __future__ import annotations

import torch

from radixlm.runtime.attention.backend import AttentionBackend
from radixlm.runtime.attention.torch_backend import TorchAttentionBackend
from radixlm.runtime.attention.triton_backend import TritonAttentionBackend


def create_attention_backend(name: str, device: torch.device) -> AttentionBackend:
    """``auto`` picks Triton on CUDA and torch elsewhere."""
    if name == "auto":
        name = "triton" if device.type == "cuda" else "torch"
    if name == "torch":
        return TorchAttentionBackend()
    if name == "triton":
        return TritonAttentionBackend()
    raise ValueError(f"unknown attention_backend {name!r} (expected auto, torch or triton)")
