"""Swap a loaded model's linear layers (and the embedding / LM head) for quantized ones.

On the CPU the layers become ``Int8Linear`` (FBGEMM) or ``GGUFLinear`` (our kernel). A GGUF file
served in its own format (``auto``, or that format asked for) keeps every tensor as stored: blocks our
kernel reads are served as they are (a fused projection whose parts differ in format becomes a
``StackedLinear``), and a tensor in a format without a kernel (Q5_K, Q2_K, F16...) keeps its
dequantized float values. Otherwise the float weights are quantized to the method asked for. On CUDA
the quantized values are dequantized back into the float weights (same numbers as the CPU path's
weights, no memory saving).

Mixture-of-experts layers: a block format turns the float ``Experts`` into ``GGUFExperts`` (each
expert's matrices rounded like a ``Linear``'s); ``int8`` and a GGUF file's own format keep them
float, and the router always stays float (``TopKRouter`` is no ``Linear``).
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from radixlm.kernels.cpu import gguf_blocks
from radixlm.runtime.layers.linear import Embedding, Linear, MergedLinear
from radixlm.runtime.layers.moe import Experts
from radixlm.runtime.layers.packed_weights import repack_weights
from radixlm.runtime.layers.quantized_linear import (
    GGUFLinear,
    Int8Linear,
    QuantizedEmbedding,
    quantize_int8_per_channel,
)
from radixlm.runtime.layers.stacked_linear import StackedLinear
from radixlm.runtime.quantization.gguf_source import GGUFBlocks

logger = logging.getLogger(__name__)
# our fused projections -> the checkpoint tensors stacked in them, in row order
FUSED_PARTS = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


@torch.no_grad()
def quantize_model(model: nn.Module, method: str, gguf: GGUFBlocks | None = None) -> None:
    """Replace every ``Linear`` in ``model`` (and its embedding/LM head) per ``method``.

    ``method`` is ``none``, ``int8`` or a block format (``q4_0``, ``q4_1``, ``q8_0``, ``q4_k``,
    ``q6_k``); ``gguf`` supplies the file's own blocks for native serving (any format our kernel
    reads, per tensor; other tensors stay float).
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
        elif isinstance(module, Experts):
            _set_module(model, name, _quantized_experts(name, module, method, gguf))
    _quantize_embeddings(model, method, gguf)


def _quantized_experts(name: str, experts: Experts, method: str, gguf: GGUFBlocks | None) -> nn.Module:
    if method == "int8" or gguf is not None:
        logger.info("%s: mixture-of-experts weights served in float under %s", name, method)
        return experts
    hidden, inter = experts.down_proj.shape[1], experts.down_proj.shape[2]
    for what, features in (("hidden_size", hidden), ("the expert intermediate size", inter)):
        if not gguf_blocks.fits(method, features):
            raise ValueError(
                f"--quantization {method} needs {what} to be a multiple of "
                f"{gguf_blocks.BLOCK_ELEMENTS[method]}, but {name} has {features}; "
                f"serve this model with q4_0, q4_1, q8_0, int8 or none"
            )
    return experts.quantized(method)


def _hf_names(name: str) -> list[str]:
    prefix, _, leaf = name.rpartition(".")
    parts = FUSED_PARTS.get(leaf, (leaf,))
    return [f"{prefix}.{p}.weight" if prefix else f"{p}.weight" for p in parts]


def _requantized(name: str, weight: torch.Tensor, bias: torch.Tensor | None, method: str) -> GGUFLinear:
    if not gguf_blocks.fits(method, weight.shape[1]):
        raise ValueError(
            f"--quantization {method} needs in_features to be a multiple of "
            f"{gguf_blocks.BLOCK_ELEMENTS[method]}, but {name} has {weight.shape[1]}; "
            f"serve this model with q4_0, q4_1, q8_0, int8 or none"
        )
    return GGUFLinear(gguf_blocks.quantize(weight, method), method, weight.shape[1], bias)


def _from_file(name: str, module: Linear, gguf: GGUFBlocks) -> nn.Module:
    """The layer served from the file's own tensors: blocks where our kernel reads their format,
    the float weights (the file's values, dequantized) elsewhere."""
    weight, bias = module.weight, module.bias
    names = _hf_names(name)
    sizes = list(getattr(module, "out_sizes", [weight.shape[0]]))
    found = [gguf.blocks(n) for n in names]
    mismatched = any(f is not None and f[1].shape[0] != size for f, size in zip(found, sizes))
    if len(sizes) != len(names) or mismatched:
        found = [None] * len(sizes)  # not the file's tensors as we know them: keep the float weights
    formats = {f[0] if f is not None else None for f in found}
    for hf_name, f in zip(names, found):
        if f is None:
            logger.info(
                "%s: stored as %s, which our kernels do not read; served in float",
                hf_name,
                gguf.type_name(hf_name),
            )
    if len(formats) == 1:  # one format for the whole layer
        fmt = formats.pop()
        if fmt is None:
            return module
        return GGUFLinear(torch.cat([f[1] for f in found if f is not None]), fmt, weight.shape[1], bias)
    parts, start = [], 0
    for size, f in zip(sizes, found):
        rows = weight[start : start + size]
        start += size
        if f is None:  # float rows, copied: the fused weight's other rows are blocks, it is not kept
            parts.append(Linear.from_weight(rows.clone()))
        else:
            parts.append(GGUFLinear(f[1], f[0], weight.shape[1]))
    return StackedLinear(parts, bias)


def _quantized_linear(name: str, module: Linear, method: str, gguf: GGUFBlocks | None) -> nn.Module:
    if method == "int8":
        return Int8Linear(module.weight, module.bias)
    if gguf is not None:
        return _from_file(name, module, gguf)
    return _requantized(name, module.weight, module.bias, method)


def _quantize_embeddings(model: nn.Module, method: str, gguf: GGUFBlocks | None) -> None:
    inner = getattr(model, "model", None)
    embed = getattr(inner, "embed_tokens", None)
    if not isinstance(embed, Embedding):
        return
    tied = getattr(model, "lm_head", None) is embed
    new = _quantized_embedding(embed.weight, method, gguf, tied)
    if new is not None:
        inner.embed_tokens = new
        if tied:
            model.lm_head = new
    if not tied and isinstance(getattr(model, "lm_head", None), Linear):
        model.lm_head = _quantized_linear("lm_head", model.lm_head, method, gguf)


def _quantized_embedding(
    weight: torch.Tensor, method: str, gguf: GGUFBlocks | None, tied: bool
) -> QuantizedEmbedding | None:
    """The embedding (and tied head) quantized; None keeps the float one (a GGUF file's embedding
    in a format without a kernel)."""
    if method == "int8":
        rows, scales = quantize_int8_per_channel(weight)
        return QuantizedEmbedding(rows, "int8", scales, Int8Linear(weight) if tied else None)
    if gguf is not None:
        own = gguf.blocks("model.embed_tokens.weight")
        if own is None:
            return None
        fmt, blocks = own
    else:
        fmt, blocks = method, _requantized("model.embed_tokens", weight, None, method).blocks
    head = GGUFLinear(blocks, fmt, weight.shape[1]) if tied else None
    return QuantizedEmbedding(head.blocks if head is not None else blocks, fmt, None, head)


def _roundtrip_weights(model: nn.Module, method: str) -> None:
    """Give each float weight the values ``method`` would serve (CUDA: no CPU kernels there)."""
    for module in model.modules():
        if isinstance(module, (Linear, Embedding)):
            _roundtrip(module.weight.data, method)
        elif isinstance(module, Experts) and method != "int8":  # int8 serves experts in float
            for param in (module.gate_up_proj, module.down_proj):
                _roundtrip(param.data.view(-1, param.shape[-1]), method)
    repack_weights(model)


def _roundtrip(w: torch.Tensor, method: str) -> None:
    """Replace the rows of ``w`` ``[N, K]`` by the values ``method`` stores for them."""
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
