"""``--enable-deterministic-inference``: a request's greedy (and seeded) output does not depend on
what else is in its batch, on whether its prefix came from the cache, or on how it was chunked.

What varied, measured on this machine's CPU build (MKL sgemm, ``torch.nn.functional.linear``): a
row's result is bit-identical for every row count ``M >= 4`` (and for any position of the row),
but ``M`` = 1, 2 and 3 take other kernels (gemv and small-M paths) whose sums round differently.
A decode step of one request is ``M = 1``, of 32 requests ``M = 32``, so the same request's logits
differed by ~1e-5 and greedy texts diverged once two tokens were close. Two fixes make every
reduction batch-invariant:

- linear layers: fewer than ``MIN_INVARIANT_ROWS`` rows are zero-padded up to it. A startup probe
  (``linear_is_row_invariant``) checks the property on the model's own weight shapes; when the BLAS
  does not have it, every linear runs in fixed tiles of ``FALLBACK_TILE_ROWS`` rows instead.
  ``F.linear`` is rebound for the forward, and ``kernels.linear.linear`` then leaves its small-batch
  kernel aside (its rows are invariant from 1 to 16 rows only, not beyond).
- attention: every query position attends alone to exactly its keys (``deterministic_attention``):
  no padding to the batch's longest sequence, no query blocks that follow the chunk size, no
  cascade merge of a shared prefix.

Sampling is already per row (each request's own seeded generator, ``sampling/sampler.py``), and
RMSNorm, rotary and activations are per row. Quantized layers (``--quantization``) are batch-invariant
as they are: the GGUF kernel quantizes each activation row on its own and gives every output element
the same arithmetic at any batch size (``kernels/cpu/gguf_linear.cpp``), and ``Int8Linear`` scales
each row before FBGEMM (tests/runtime/quantization/test_deterministic_quantized.py).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F

from radixlm.runtime.executor.deterministic_attention import decode_per_position, extend_per_position

logger = logging.getLogger(__name__)

MIN_INVARIANT_ROWS = 4
FALLBACK_TILE_ROWS = 64
_PROBE_ROWS = (MIN_INVARIANT_ROWS, 7, 64, 333)
_plain_linear = F.linear


def padded_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` with fewer than ``MIN_INVARIANT_ROWS`` rows zero-padded up to it."""
    rows = x.numel() // max(x.shape[-1], 1)
    if rows == 0 or rows >= MIN_INVARIANT_ROWS:
        return _plain_linear(x, weight, bias)
    flat = x.reshape(rows, x.shape[-1])
    padded = torch.cat([flat, flat.new_zeros(MIN_INVARIANT_ROWS - rows, flat.shape[1])])
    out = _plain_linear(padded, weight, bias)[:rows]
    return out.reshape(*x.shape[:-1], out.shape[-1])


def tiled_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` computed in fixed tiles of ``FALLBACK_TILE_ROWS`` rows (the last one padded)."""
    rows = x.numel() // max(x.shape[-1], 1)
    flat = x.reshape(rows, x.shape[-1])
    pad = -rows % FALLBACK_TILE_ROWS
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad, flat.shape[1])])
    tiles = [_plain_linear(t, weight, bias) for t in flat.split(FALLBACK_TILE_ROWS)]
    out = torch.cat(tiles)[:rows] if tiles else _plain_linear(flat, weight, bias)
    return out.reshape(*x.shape[:-1], weight.shape[0])


def linear_is_row_invariant(weights: list[torch.Tensor]) -> bool:
    """Whether ``padded_linear`` gives each row the same bits at every batch size, for these weights."""
    gen = torch.Generator().manual_seed(0)
    for weight in weights:
        x = torch.randn(max(_PROBE_ROWS), weight.shape[1], generator=gen).to(weight.dtype).to(weight.device)
        first = padded_linear(x[:1], weight)
        for rows in _PROBE_ROWS:
            if not torch.equal(padded_linear(x[:rows], weight)[:1], first):
                return False
    return True


@contextlib.contextmanager
def batch_invariant_linear(linear: Callable[..., torch.Tensor]) -> Iterator[None]:
    """Route ``torch.nn.functional.linear`` to ``linear`` while the block runs (one forward pass)."""
    F.linear = linear
    try:
        yield
    finally:
        F.linear = _plain_linear


def enable_deterministic_inference(model_runner: Any) -> None:
    """Make ``model_runner``'s forward passes batch-invariant (see the module doc)."""
    weights = {tuple(p.shape): p for p in model_runner.model.parameters() if p.dim() == 2}
    linear = padded_linear if linear_is_row_invariant(list(weights.values())) else tiled_linear
    if linear is tiled_linear:
        logger.warning(
            "deterministic inference: this BLAS is not row-invariant; using %d-row tiles", FALLBACK_TILE_ROWS
        )
    backend = model_runner.attn_backend
    backend.forward_extend = extend_per_position
    backend.forward_decode = decode_per_position
    forward = model_runner.model.forward

    def invariant_forward(*args: Any, **kwargs: Any) -> Any:
        with batch_invariant_linear(linear):
            return forward(*args, **kwargs)

    model_runner.model.forward = invariant_forward
