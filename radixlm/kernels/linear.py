"""fp32 products on the CPU: the one dispatch point of ``x @ W^T (+ b)`` for the float layers.

On the CPU in fp32 a layer whose weight was packed for oneDNN (``runtime/layers/packed_weights.py``;
the model runner packs every float layer at load) takes our threaded kernel
(``cpu/small_batch_linear.cpp``, once built) up to ``PACKED_KERNEL_MAX_ROWS`` rows and the packed
product beyond. Unpacked layers take the kernel up to ``SMALL_BATCH_MAX_ROWS`` rows (``HEAD_MAX_ROWS``
for an LM head) and ``F.linear`` beyond. Measured (``benchmarks/kernels/packed_linear.py``; figures in
``benchmarks/log/packed-weights-attention-and-call-overhead.md``): torch runs a one-row product on one
thread and was 1.5-5x slower up to 16 rows on the model's shapes; on LM heads (vocabularies of
8k-152k rows) it stayed 1.1-2.3x slower up to 128 rows. The packed product was slower than the
kernel up to 8 rows, even at 12, and faster from 16 on.
A layer with an fp16 copy of its weight (an encoder's, ``runtime/layers/half_weights.py``) gives up
to ``HALF_MAX_ROWS`` rows to the kernel reading that copy (half the bytes). A layer with its weight in
column panels (``pack_panels``; an encoder's, ``runtime/layers/panel_weights.py``) gives up to
``PANEL_MAX_ROWS`` rows to ``cpu/panel_linear.cpp`` (6x16 register tiles): on the encoder's shapes it
was 1.2-1.9x the small-batch kernel and oneDNN's packed product at 8-24 rows on one thread, even with
oneDNN at 32-256 (``benchmarks/kernels/panel_linear.py``, benchmarks/log/embeddings.md).
Anything else (CUDA, other dtypes, autograd) is ``F.linear``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from radixlm.kernels import product_threads
from radixlm.kernels.cpu.build import decode_kernels_if_ready

SMALL_BATCH_MAX_ROWS = 16
HEAD_MAX_ROWS = 128
PACKED_KERNEL_MAX_ROWS = 12
HALF_MAX_ROWS = 32
PANEL_MAX_ROWS = 64
PANEL_WIDTH = 16  # output features per panel (two AVX2 vectors)
_TORCH_LINEAR = F.linear


def packed_linear(
    x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, out_features: int
) -> torch.Tensor:
    """``x @ W^T (+ bias)`` by oneDNN's matmul, with ``packed = packed_weights.pack_weight(W)``;
    ``x`` ``[..., in]`` fp32."""
    rows = x.numel() // max(x.shape[-1], 1)
    flat = x.reshape(rows, x.shape[-1]).contiguous()
    out = torch.ops.mkldnn._linear_pointwise(flat, packed, bias, "none", [], "")
    return out.reshape(*x.shape[:-1], out_features)


def pack_panels(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` ``[n, k]`` (fp32 or fp16) as column panels ``[ceil(n / 16), k, 16]`` for
    ``panel_linear``: output ``16 * j + c``, input ``t`` at ``[j][t][c]``; the last panel zero-filled."""
    n, k = weight.shape
    count = -(-n // PANEL_WIDTH)
    padded = torch.zeros(count * PANEL_WIDTH, k, dtype=weight.dtype)
    padded[:n] = weight.detach()
    return padded.view(count, PANEL_WIDTH, k).transpose(1, 2).contiguous()


def linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    max_rows: int = SMALL_BATCH_MAX_ROWS,
    packed: torch.Tensor | None = None,
    half: torch.Tensor | None = None,
    panels: torch.Tensor | None = None,
) -> torch.Tensor:
    """``F.linear(x, weight, bias)``, the dispatch point. fp32 on the CPU: up to ``max_rows`` rows
    take the threaded kernel once built; given ``packed`` (``pack_weight(weight)``), up to
    ``PACKED_KERNEL_MAX_ROWS`` rows do and more take the packed product; given ``half`` (``weight``'s
    values in fp16), up to ``HALF_MAX_ROWS`` rows take the kernel reading it; given ``panels``
    (``pack_panels`` of ``weight`` or of its fp16 values), up to ``PANEL_MAX_ROWS`` rows take
    ``panel_linear`` reading them."""
    if half is not None:
        max_rows = HALF_MAX_ROWS
    elif packed is not None:
        max_rows = PACKED_KERNEL_MAX_ROWS
    rows = x.numel() // max(x.shape[-1], 1)
    # F.linear rebound by someone else (deterministic inference's batch-invariant products) wins;
    # the kernels have no backward, so a product autograd would track stays torch's
    tracked = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)
    if (
        rows > 0
        and not tracked
        and F.linear is _TORCH_LINEAR
        and x.is_cpu
        and x.dtype == torch.float32
        and weight.dtype == torch.float32
        and weight.is_cpu
        and (bias is None or bias.dtype == torch.float32)
    ):
        if panels is not None and rows <= PANEL_MAX_ROWS and (bias is None or bias.is_contiguous()):
            kernels = decode_kernels_if_ready()
            if kernels is not None:
                flat = x.reshape(rows, x.shape[-1]).contiguous()
                out = kernels.panel_linear(flat, panels, weight.shape[0], bias, product_threads.current())
                return out.reshape(*x.shape[:-1], weight.shape[0])
        if rows > max_rows:
            if packed is not None:
                return packed_linear(x, packed, bias, weight.shape[0])
            return F.linear(x, weight, bias)
        kernels = decode_kernels_if_ready()
        if kernels is not None and weight.is_contiguous() and (bias is None or bias.is_contiguous()):
            read = half if half is not None else weight
            flat = x.reshape(rows, x.shape[-1]).contiguous()
            out = kernels.small_batch_linear(flat, read, bias, product_threads.current())
            return out.reshape(*x.shape[:-1], weight.shape[0])
    return F.linear(x, weight, bias)
