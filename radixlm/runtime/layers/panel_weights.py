"""Encoder weights copied once into column panels (``kernels.linear.pack_panels``), for products of
up to ``PANEL_MAX_ROWS`` rows: a batch-1 embedding's forward (a sentence is a few dozen tokens).

The panel kernel (``kernels/cpu/panel_linear.cpp``) keeps 6 rows x 16 outputs in registers; on
all-MiniLM-L6-v2's shapes it was 1.2-1.9x the small-batch kernel and oneDNN's packed product at 8-24
rows (benchmarks/log/embeddings.md). The panels are made from the fp16 copy when the layer has one
(``half_weights.py``: half the bytes to stream), else from the fp32 weight. Decoders keep their
two copies (plain and oneDNN-packed): a third of a multi-GB model is not worth its few-row gain.
Made by ``pack_model_weights`` (so ``--disable-weight-packing`` and deterministic inference make
none) and renewed by ``repack_weights``.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from radixlm.kernels.linear import pack_panels
from radixlm.runtime.layers.linear import Linear

logger = logging.getLogger(__name__)


def layer_panels(module: Linear) -> torch.Tensor:
    """The panels of ``module``'s weight: its fp16 copy's when it has one."""
    source = module.weight_fp16 if module.weight_fp16 is not None else module.weight
    return pack_panels(source)


def add_panel_weights(model: nn.Module) -> int:
    """Give every fp32 CPU ``Linear`` of an encoder ``model`` (``model.is_encoder``) its weight in
    panels (``Linear.panels``); returns the bytes added (0 for other models)."""
    if not getattr(model, "is_encoder", False):
        return 0
    added = 0
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if not isinstance(module, Linear) or weight is None or weight.dim() != 2:
            continue
        if weight.dtype != torch.float32 or not weight.is_cpu:
            continue
        module.panels = layer_panels(module)
        added += module.panels.numel() * module.panels.element_size()
    if added:
        logger.info("encoder weights in column panels for few-row products: %.0f MB more", added / 1e6)
    return added
