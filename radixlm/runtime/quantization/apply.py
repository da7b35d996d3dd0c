"""How each module is served once its checkpoint tensors have arrived (``ServingPlan.build``).

On the CPU the linear layers become ``Int8Linear`` (FBGEMM) or ``GGUFLinear`` (our kernel). A GGUF file
served in its own format (``auto``, or that format asked for) keeps every tensor as stored: blocks our
kernel reads are served as they are (views into the mapped file; a fused projection's parts are joined,
or become a ``StackedLinear`` when their formats differ), and a tensor in a format without a kernel
(Q5_K, Q2_K, F16...) keeps its float values. Otherwise the float weights of each module are quantized to
the method asked for as soon as they are complete. On CUDA the quantized values are dequantized back
into the float weights (same numbers as the CPU path's weights, no memory saving).

Mixture-of-experts layers: a block format turns the float ``Experts`` into ``GGUFExperts`` (each
expert's matrices rounded like a ``Linear``'s) once the layer's experts have arrived; ``int8`` and a
GGUF file's own format keep them float, and the router always stays float (``TopKRouter`` is no
``Linear``).
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
from radixlm.runtime.quantization.methods import auto_for_16bit, resolve_method
from radixlm.runtime.weights.materialize import Parts, materialize, set_module
from radixlm.runtime.weights.source import BlockTensor, WeightSource, join_rows

logger = logging.getLogger(__name__)


class ServingPlan:
    """``method`` (``none``, ``int8`` or a block format) applied module by module on ``device``;
    ``native``: the checkpoint's own blocks are served where our kernel reads their format."""

    def __init__(self, method: str, device: torch.device, native: bool = False, chosen: bool = False) -> None:
        """``chosen``: ``method`` was picked by ``auto`` (a model it cannot hold is served in float)."""
        self.method, self.device, self.native, self.chosen = method, device, native, chosen

    @classmethod
    def resolve(cls, requested: str, source: WeightSource, device: torch.device) -> ServingPlan:
        """The plan for ``--quantization requested`` (see ``resolve_method``) on this checkpoint."""
        main = source.main_format() if device.type == "cpu" else None
        if requested == "auto" and main is None:
            chosen = auto_for_16bit(source.hf_config(), device)
            if chosen is not None:
                return cls(chosen, device, chosen=True)
        method = resolve_method(requested, device, main)
        return cls(method, device, native=method == main and main is not None)

    def check(self, model: nn.Module) -> None:
        """ValueError naming the first layer ``method`` cannot quantize, before any tensor is read."""
        if self.device.type != "cpu" or self.native or self.method not in gguf_blocks.BLOCK_ELEMENTS:
            return
        modules = list(model.named_modules())
        linears = [(n, m) for n, m in modules if type(m) in (Linear, MergedLinear)]
        for name, module in linears + [(n, m) for n, m in modules if isinstance(m, Embedding)]:
            if self.chosen and not gguf_blocks.fits(self.method, module.weight.shape[1]):
                self.method = "none"
                return
            _check_fits(name, module.weight.shape[1], self.method)
        for name, module in modules:
            if isinstance(module, Experts):
                _check_fits(name, module.down_proj.shape[1], self.method, "hidden_size")
                _check_fits(name, module.down_proj.shape[2], self.method, "the expert intermediate size")

    @torch.no_grad()
    def build(self, model: nn.Module, name: str, module: nn.Module, parts: Parts) -> nn.Module | None:
        """The module to serve at ``name`` from its tensors ``parts`` (None: ``module``, materialized)."""
        is_linear = type(module) in (Linear, MergedLinear)
        is_embedding = isinstance(module, Embedding) and name.endswith("embed_tokens")
        is_experts = isinstance(module, Experts)
        if self.method == "none" or not (is_linear or is_embedding or is_experts):
            materialize(module, parts, self.device)
            return None
        if self.device.type != "cpu":
            materialize(module, parts, self.device)
            _roundtrip(module, self.method)
            return None
        if is_experts:
            materialize(module, parts, self.device)
            if self.method == "int8" or self.native:
                logger.info("%s: mixture-of-experts weights served in float under %s", name, self.method)
                return None
            return module.quantized(self.method)
        if is_embedding:
            return self._embedding(model, module, parts)
        if self.native:
            return _from_file(name, module, parts, self.device)
        materialize(module, parts, self.device)
        return _quantized_linear(name, module.weight, module.bias, self.method)

    def _embedding(self, model: nn.Module, module: nn.Module, parts: Parts) -> nn.Module | None:
        tied = getattr(model, "lm_head", None) is module
        stored = parts.get(("weight", None))
        if self.native and isinstance(stored, BlockTensor):
            fmt, blocks = stored.fmt, stored.blocks
        elif self.native:  # a format without a kernel: the float embedding (and head)
            materialize(module, parts, self.device)
            return None
        else:
            materialize(module, parts, self.device)
            weight = module.weight
            if self.method == "int8":
                rows, scales = quantize_int8_per_channel(weight)
                new = QuantizedEmbedding(rows, "int8", scales, Int8Linear(weight) if tied else None)
                return _tie(model, new, tied)
            fmt, blocks = self.method, _requantized("model.embed_tokens", weight, None, self.method).blocks
        head = GGUFLinear(blocks, fmt, module.weight.shape[1]) if tied else None
        new = QuantizedEmbedding(head.blocks if head is not None else blocks, fmt, None, head)
        return _tie(model, new, tied)


@torch.no_grad()
def quantize_model(model: nn.Module, method: str, device: torch.device) -> None:
    """Serve an already built float ``model`` (real weights, e.g. random ones in a benchmark) with
    ``method`` (``resolve_method``'s result), as loading would have."""
    plan = ServingPlan(method, device)
    plan.check(model)
    for name, module in list(model.named_modules()):
        if type(module) in (Linear, MergedLinear) or isinstance(module, Embedding):
            new = plan.build(model, name, module, {})
            if new is not None:
                set_module(model, name, new)


def _tie(model: nn.Module, embedding: QuantizedEmbedding, tied: bool) -> QuantizedEmbedding:
    if tied:
        model.lm_head = embedding
    return embedding


def _check_fits(name: str, in_features: int, method: str, what: str = "in_features") -> None:
    if not gguf_blocks.fits(method, in_features):
        raise ValueError(
            f"--quantization {method} needs {what} to be a multiple of "
            f"{gguf_blocks.BLOCK_ELEMENTS[method]}, but {name} has {in_features}; "
            f"serve this model with q4_0, q4_1, q8_0, int8 or none"
        )


def _requantized(name: str, weight: torch.Tensor, bias: torch.Tensor | None, method: str) -> GGUFLinear:
    _check_fits(name, weight.shape[1], method)
    return GGUFLinear(gguf_blocks.quantize(weight, method), method, weight.shape[1], bias)


def _quantized_linear(name: str, weight: torch.Tensor, bias: torch.Tensor | None, method: str) -> nn.Module:
    if method == "int8":
        return Int8Linear(weight, bias)
    return _requantized(name, weight, bias, method)


def _from_file(name: str, module: Linear, parts: Parts, device: torch.device) -> nn.Module:
    """The layer served from the file's own tensors: blocks where our kernel reads their format, the
    float values (dequantized) elsewhere; a fused layer's parts joined when they share one format."""
    shards = sorted(s for p, s in parts if p == "weight" and s is not None) or [None]
    weights = [parts[("weight", s)] for s in shards]
    bias_parts = {s: t for (p, s), t in parts.items() if p == "bias"}
    bias = None
    if bias_parts:
        bias = torch.cat([torch.as_tensor(bias_parts[s]).float().reshape(-1) for s in shards])
    formats = {w.fmt if isinstance(w, BlockTensor) else None for w in weights}
    for shard, w in zip(shards, weights):
        if not isinstance(w, BlockTensor):
            logger.info("%s[%s]: stored in a format our kernels do not read; served in float", name, shard)
    in_features = module.weight.shape[1]
    if formats == {None}:
        materialize(module, parts, device)
        return module
    if len(formats) == 1:  # one block format for the whole layer
        block_weights = [w for w in weights if isinstance(w, BlockTensor)]
        blocks = [w.blocks for w in block_weights]
        joined, copied = (blocks[0], False) if len(blocks) == 1 else join_rows(blocks)

        def release() -> None:
            for w in block_weights:
                w.release()

        if copied:  # into the joined tensor: the file's pages are not needed
            release()
        return GGUFLinear(
            joined, block_weights[0].fmt, in_features, bias, release=None if copied else release
        )
    stacked: list[nn.Module] = []
    for w in weights:
        if isinstance(w, BlockTensor):
            stacked.append(GGUFLinear(w.blocks, w.fmt, in_features, release=w.release))
        else:
            stacked.append(Linear.from_weight(w.to(device, torch.float32).contiguous()))
    return StackedLinear(stacked, bias)


def _roundtrip(module: nn.Module, method: str) -> None:
    """Give a float weight the values ``method`` would serve (CUDA: no CPU kernels there)."""
    if isinstance(module, Experts) and method != "int8":  # int8 serves experts in float
        for param in (module.gate_up_proj, module.down_proj):
            _roundtrip_rows(param.data.view(-1, param.shape[-1]), method)
    if isinstance(module, (Linear, Embedding)):
        _roundtrip_rows(module.weight.data, method)


def _roundtrip_rows(w: torch.Tensor, method: str) -> None:
    """Replace the rows of ``w`` ``[N, K]`` by the values ``method`` stores for them."""
    if method == "int8":
        q, scales = quantize_int8_per_channel(w)
        values = q.float() * scales[:, None]
    else:
        values = gguf_blocks.dequantize(gguf_blocks.quantize(w, method), method)
    w.copy_(values.to(w.device, w.dtype))


@torch.no_grad()
def _roundtrip_weights(model: nn.Module, method: str) -> None:
    """``_roundtrip`` on every float linear and embedding of an already loaded ``model``."""
    for module in model.modules():
        _roundtrip(module, method)
    repack_weights(model)
