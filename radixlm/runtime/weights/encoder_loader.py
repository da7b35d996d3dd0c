"""Load a BERT/RoBERTa/XLM-R encoder checkpoint (``models/bert.py``) from a Hugging Face directory."""

from __future__ import annotations

from typing import Any

import torch

from radixlm.runtime.models.bert import EncoderModel
from radixlm.runtime.models.model_impl import ModelDims
from radixlm.runtime.weights.source import WeightSource


def load_encoder(
    source: WeightSource, hf_config: dict[str, Any], device: torch.device, dtype: torch.dtype
) -> tuple[EncoderModel, ModelDims]:
    """The encoder with its weights on ``device`` in ``dtype``, and its dimensions (an encoder keeps no
    KV cache: one layer of one one-wide head sizes the runner's unused pool)."""
    with torch.device(device):
        net = EncoderModel(hf_config).to(dtype)
    net.load_weights((name, torch.as_tensor(t)) for name, t in source.tensors())
    net.eval().requires_grad_(False)
    offset = net.body.embeddings.position_offset
    dims = ModelDims(
        architecture=hf_config["architectures"][0],
        vocab_size=int(hf_config["vocab_size"]),
        context_length=int(hf_config["max_position_embeddings"]) - offset,
        num_layers=1,
        num_kv_heads=1,
        head_dim=1,
        impl="native",
    )
    return net, dims
