"""Copy a checkpoint's Hugging Face-named tensors into a model's parameters, shared by every architecture.

A model whose fused parameters (``qkv_proj``, ``gate_up_proj``) stack several checkpoint tensors
passes the stacking table; every parameter must be set exactly as the checkpoint says (shape checked),
and a tensor the model has no place for is an error, never dropped silently.

The loader (``radixlm.runtime.weights.loader``) builds models with their parameters on the meta device
and installs a ``ParamSink`` (``loading_into``) for the call: tensors then go to the sink, which builds
each module (float, or quantized) as soon as all of its tensors have arrived. A tensor may be a
``BlockTensor`` (GGUF blocks): without a sink, or with a ``transform``, it is dequantized first.

Mixture-of-experts checkpoints name each expert's tensors (``...experts.{e}.gate_proj.weight``):
``expert_key`` maps them onto the stacked ``Experts`` parameters (shard ``(expert, part)``), whose
fused tensors (transformers 5's in-memory layout) also load as they are.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from typing import Protocol

import torch
from torch import nn

from radixlm.runtime.layers.linear import MergedLinear, copy_checked
from radixlm.runtime.layers.moe import Experts
from radixlm.runtime.weights.source import BlockTensor, StoredTensor, as_float

# (fused parameter, checkpoint projection, shard index)
Stacking = tuple[tuple[str, str, int], ...]
LLAMA_STACKING: Stacking = (
    ("qkv_proj", "q_proj", 0),
    ("qkv_proj", "k_proj", 1),
    ("qkv_proj", "v_proj", 2),
    ("gate_up_proj", "gate_proj", 0),
    ("gate_up_proj", "up_proj", 1),
)
# one expert's checkpoint projection -> (stacked ``Experts`` parameter, part)
EXPERT_STACKING = {
    "gate_proj": ("gate_up_proj", 0),
    "up_proj": ("gate_up_proj", 1),
    "down_proj": ("down_proj", 0),
}
# a row block of a fused parameter (``MergedLinear``), or (expert, part) of a stacked ``Experts`` one
Shard = int | tuple[int, int]


class ParamSink(Protocol):
    """Receives the checkpoint's tensors in place of copying them into (meta) parameters."""

    def expect(self, model: nn.Module, expected: set[str]) -> None:
        """Called first with every key ``receive`` will see (``name`` or ``name[shard]``)."""
        ...

    def receive(self, key: str, target: str, shard: Shard | None, tensor: StoredTensor) -> None:
        """The tensor for parameter ``target`` (row block ``shard`` of a fused one, or all of it)."""
        ...


_SINK: ContextVar[ParamSink | None] = ContextVar("radixlm_param_sink", default=None)


@contextlib.contextmanager
def loading_into(sink: ParamSink) -> Iterator[None]:
    """Route ``load_checkpoint`` calls made inside the block to ``sink``."""
    token = _SINK.set(sink)
    try:
        yield
    finally:
        _SINK.reset(token)


@torch.no_grad()
def load_checkpoint(
    model: nn.Module,
    weights: Iterable[tuple[str, StoredTensor]],
    stacking: Stacking = LLAMA_STACKING,
    skip: Callable[[str], bool] = lambda name: False,
    transform: Callable[[str, torch.Tensor], torch.Tensor] | None = None,
) -> None:
    """Copy ``weights`` into ``model``'s parameters; raise ValueError if one is unexpected or missing.

    ``skip(name)`` drops checkpoint tensors the model does not use (e.g. rotary buffers, a tied LM
    head); ``transform(name, tensor)`` adapts a tensor's values before the copy (e.g. Gemma's norm
    weights are stored as ``w`` and applied as ``1 + w``).
    """
    params = dict(model.named_parameters())
    modules = dict(model.named_modules())
    pieces: dict[str, set[str]] = {}  # parameter -> the checkpoint pieces that set it
    for name in params:
        module_name, param_name = name.rsplit(".", 1)
        module = modules[module_name]
        if isinstance(module, MergedLinear):
            pieces[name] = {piece_key(name, i) for i in range(len(module.out_sizes))}
        elif isinstance(module, Experts):
            pieces[name] = {piece_key(name, s) for s in module.shard_keys(param_name)}
        else:
            pieces[name] = {name}
    expected = set().union(*pieces.values())
    sink = _SINK.get()
    if sink is not None:
        sink.expect(model, expected)
    loaded = set()
    for name, stored in weights:
        if skip(name):
            continue
        target, shard = expert_key(name) or stacked_key(name, stacking) or (name, None)
        if target not in params:
            raise ValueError(f"unexpected checkpoint tensor {name!r}")
        if transform is not None:
            stored = transform(name, as_float(stored))
        key = target if shard is None else piece_key(target, shard)
        if sink is not None:
            sink.receive(key, target, shard, stored)
            loaded |= pieces[target] if shard is None else {key}
            continue
        tensor = as_float(stored)
        if isinstance(stored, BlockTensor):
            stored.release()
        if shard is None:
            copy_checked(params[target].data, tensor, name)
            loaded |= pieces[target]
        else:
            module_name, param_name = target.rsplit(".", 1)
            modules[module_name].load_shard(param_name, shard, tensor)
            loaded.add(key)
    missing = sorted(expected - loaded)
    if missing:
        raise ValueError(
            f"checkpoint is missing weights: {', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}"
        )


def stacked_key(name: str, stacking: Stacking = LLAMA_STACKING) -> tuple[str, int] | None:
    """``...q_proj.weight`` -> (``...qkv_proj.weight``, 0), or None for unfused tensors."""
    parts = name.split(".")
    for fused, proj, shard in stacking:
        if len(parts) >= 2 and parts[-2] == proj:
            return ".".join([*parts[:-2], fused, parts[-1]]), shard
    return None


def expert_key(name: str) -> tuple[str, tuple[int, int]] | None:
    """``...experts.3.up_proj.weight`` -> (``...experts.gate_up_proj``, (3, 1)), or None."""
    parts = name.split(".")
    if len(parts) >= 4 and parts[-4] == "experts" and parts[-3].isdigit() and parts[-1] == "weight":
        fused = EXPERT_STACKING.get(parts[-2])
        if fused is not None:
            return ".".join([*parts[:-3], fused[0]]), (int(parts[-3]), fused[1])
    return None


def piece_key(target: str, shard: Shard) -> str:
    """The name a checkpoint piece of ``target`` goes by in errors and in the sink's bookkeeping."""
    return f"{target}[{shard}]" if isinstance(shard, int) else f"{target}[expert {shard[0]}][{shard[1]}]"
