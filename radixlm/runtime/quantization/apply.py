"""Swap a loaded model's linear layers (and the embedding / LM head) for quantized ones.

On the CPU the layers become ``Int8Linear`` (FBGEMM) or ``GGUFLinear`` (our kernel); a GGUF file's
own blocks are used as they are when their format is the one served (or ``auto`` chose it), else the
float weights are quantized. On CUDA the quantized values are dequantized back into the float
weights (same numbers as the CPU path's weights, no memory saving).
"""
from __future__ import annotations

import torch
from torch import nn

from radixlm.kernels.cpu import gguf_blocks
from radixlm.runtime.layers.linear import Embedding, Linear, MergedLinear
from radixlm.runtime.layers.quantized_linear import (
    GGUFLinear,
    Int8Linear,
    QuantizedEmbedding,
    quantize_int8_per_channel,
)
from radixlm.runtime.quantization.gguf_source import GGUFBlocks

# our fused projections -> the checkpoint tensors stacked in them, in row order
FUSED_PARTS = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


@torch.no_grad()
def quantize_model(model: nn.Module, method: str, gguf: GGUFBlocks | None = None) -> None:
    """Replace every ``Linear`` in ``model`` (and its embedding/LM head) per ``method``.

    ``method`` is ``none``, ``int8`` or a block format (``q4_0``, ``q4_1``, ``q8_0``); ``gguf``
    supplies the file's own blocks for native serving (any format our kernel reads, per tensor).
    """
    if method == "none":
        return
    device = next(model.parameters()).device
    if device.type != "cpu":
        _roundtrip_weights(model, method)
        return
    for name, module in list(model.named_modules()):
        if type(module) in (Linear, MergedLinear) and not name.endswith("lm_head"):
            _set_module(model, name, _quantized_linear(name, module, method, gguf))
    _quantize_embeddings(model, method, gguf)


def _hf_names(name: str) -> list[str]:
    prefix, _, leaf = name.rpartition(".")
    parts = FUSED_PARTS.get(leaf, (leaf,))
    return [f"{prefix}.{p}.weight" if prefix else f"{p}.weight" for p in parts]


def _own_blocks(hf_names: list[str], gguf: GGUFBlocks | None) -> tuple[str, torch.Tensor] | None:
    """The file's blocks for these tensors stacked by rows, when all are in one native format."""
    if gguf is None:
        return None
    found = [gguf.blocks(n) for n in hf_names]
    if any(f is None for f in found) or len({f[0] for f in found if f is not None}) != 1:
        return None
    return found[0][0], torch.cat([f[1] for f in found if f is not None])  # type: ignore[index]


def _quantized_linear(name: str, module: Linear, method: str, gguf: GGUFBlocks | None) -> nn.Module:
    weight = module.weight
    bias = module.bias
    if method == "int8":
        return Int8Linear(weight, bias)
    own = _own_blocks(_hf_names(name), gguf)
    if own is not None and own[1].shape[0] == weight.shape[0]:
        return GGUFLinear(own[1], own[0], weight.shape[1], bias)
    return GGUFLinear(gguf_blocks.quantize(weight, method), method, weight.shape[1], bias)


def _quantize_embeddings(model: nn.Module, method: str, gguf: GGUFBlocks | None) -> None:
    inner = getattr(model, "model", None)
    embed = getattr(inner, "embed_tokens", None)
    if not isinstance(embed, Embedding):
        return
    tied = getattr(model, "lm_head", None) is embed
    weight = embed.weight
    if method == "int8":
        rows, scales = quantize_int8_per_channel(weight)
        head = Int8Linear(weight) if tied else None
        new = QuantizedEmbedding(rows, "int8", scales, head)
    else:
        own = _own_blocks(["model.embed_tokens.weight"], gguf)
        fmt, blocks = own if own is not None else (method, gguf_blocks.quantize(weight, method))
        head = GGUFLinear(blocks, fmt, weight.shape[1]) if tied else None
        new = QuantizedEmbedding(head.blocks if head is not None else blocks, fmt, None, head)
    inner.embed_tokens = new
    if tied:
        model.lm_head = new
    elif isinstance(getattr(model, "lm_head", None), Linear):
        model.lm_head = _quantized_linear("lm_head", model.lm_head, method, gguf)


def _roundtrip_weights(model: nn.Module, method: str) -> None:
    """Give each float weight the values ``method`` would serve (CUDA: no CPU kernels there)."""
    for module in model.modules():
        if isinstance(module, (Linear, Embedding)):
            w = module.weight.data
            if method == "int8":
                q, scales = quantize_int8_per_channel(w)
                values = q.float() * scales[:, None]
            else:
                values = gguf_blocks.dequantize(gguf_blocks.quantize(w, method), method)
            w.copy_(values.to(w.device, w.dtype))


def _set_module(root: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, leaf = name.rpartition(".")
    setattr(root.get_submodule(parent_name) if parent_name else root, leaf, new)


def serve_quantized(model: nn.Module, requested: str, model_name: str, device: torch.device) -> str:
    """Resolve ``requested`` (``--quantization``) for ``model_name`` on ``device``, swap the layers,
    and return the method now served (what ``get_server_info`` reports)."""
    from radixlm.runtime.quantization.gguf_source import gguf_path_of
    from radixlm.runtime.quantization.methods import resolve_method

    path = gguf_path_of(model_name) if device.type == "cpu" and requested != "none" else None
    gguf = GGUFBlocks(path) if path is not None else None
    main = gguf.main_format() if gguf is not None else None
    method = resolve_method(requested, device, main)
    quantize_model(model, method, gguf if method == main else None)
    return method
