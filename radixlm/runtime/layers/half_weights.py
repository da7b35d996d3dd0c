"""fp16 copies of an encoder's fp32 weights on the CPU, for its products of few rows (opt-in:
``ServerArgs.encoder_fp16_weights``).

A batch-1 embedding is one forward of a few dozen tokens; its products read every weight once and
do little with it. all-MiniLM-L6-v2's layers are 42 MB of fp32: more than the 32 MB L3 cache of the
benchmark box, so each forward streams them all from memory again: the products of a 12-row forward
took 1.6x as long per layer cycling through all six layers as through three (21 MB), 2x as through
one (benchmarks/log/embeddings.md). In fp16 they are half the bytes. Their values are first rounded
to fp16 in the fp32 weight itself, so every path (the small-batch kernel reading the fp16 copy up to
``HALF_MAX_ROWS`` rows, oneDNN's packed product beyond) multiplies the same values, in fp32
arithmetic; the embeddings differ from fp32 weights' by that rounding only (cosine >= 0.9999 against
sentence-transformers, tests/runtime/pooling/test_encoder_fp16_weights.py).
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from radixlm.runtime.layers.linear import Linear

logger = logging.getLogger(__name__)
_FP16_MAX = float(torch.finfo(torch.float16).max)


def add_half_weights_if_asked(enabled: bool, model: nn.Module) -> None:
    """``add_half_weights`` for an encoder when ``enabled`` (``ServerArgs.encoder_fp16_weights``): at
    load and after new weights, before packing (the packed copy takes the rounded values)."""
    if enabled and getattr(model, "is_encoder", False):
        add_half_weights(model)


def add_half_weights(model: nn.Module) -> int:
    """Round every fp32 CPU ``Linear`` weight of ``model`` to fp16 values and give the layer an fp16
    copy (``Linear.weight_fp16``); returns the bytes added. Call before packing (the packed copy is
    made from the rounded weight)."""
    added = 0
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if not isinstance(module, Linear) or weight is None or weight.dim() != 2:
            continue
        if weight.dtype != torch.float32 or not weight.is_cpu or weight.abs().max() > _FP16_MAX:
            continue  # a weight beyond fp16's range keeps its fp32 path
        with torch.no_grad():
            half = weight.detach().to(torch.float16).contiguous()
            weight.copy_(half)
        module.weight_fp16 = half
        added += half.numel() * half.element_size()
    if added:
        logger.info("weights rounded to fp16, an fp16 copy for small batches: %.0f MB more", added / 1e6)
    return added
