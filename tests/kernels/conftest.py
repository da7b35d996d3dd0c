"""Kernel tests run the Triton kernels on CUDA when present, else in Triton's CPU interpreter.

``TRITON_INTERPRET`` must be set before a kernel is decorated; radixlm decorates its kernels
lazily (on first launch), so setting it here, at collection time, is early enough even when other
test directories imported ``radixlm.kernels`` first. On a CUDA machine nothing is changed.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture
def device() -> torch.device:
    """Where the Triton kernels run: the GPU, or the CPU through the interpreter."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
