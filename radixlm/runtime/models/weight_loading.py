"""Copy a checkpoint's Hugging Face-named tensors into a model's parameters, shared by every architecture.

A model whose fused parameters (``qkv_proj``, ``gate_up_proj``) stack several checkpoint tensors
passes the stacking table; every parameter must be set exactly as the checkpoint says (shape checked),
and a tensor the model has no place for is an error, never dropped silently.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn

from radixlm.runtime.layers.linear import MergedLinear, copy_checked

# (fused parameter, checkpoint projection, shard index)
Stacking = tuple[tuple[str, str, int], ...]
LLAMA_STACKING: Stacking = (
    ("qkv_proj", "q_proj", 0),
    ("qkv_proj", "k_proj", 1),
    ("qkv_proj", "v_proj", 2),
    ("gate_up_proj", "gate_proj", 0),
    ("gate_up_proj", "up_proj", 1),
)


@torch.no_grad()
def load_checkpoint(
    model: nn.Module,
    weights: Iterable[tuple[str, torch.Tensor]],
    stacking: Stacking = LLAMA_STACKING,
    skip: Callable[[str], bool] = lambda name: False,
    transform: Callable[[str, torch.Tensor], torch.Tensor] = lambda name, t: t,
) -> None:
    """Copy ``weights`` into ``model``'s parameters; raise ValueError if one is unexpected or missing.

    ``skip(name)`` drops checkpoint tensors the model does not use (e.g. rotary buffers, a tied LM
    head); ``transform(name, tensor)`` adapts a tensor's values before the copy (e.g. Gemma's norm
    weights are stored as ``w`` and applied as ``1 + w``).
    """
    params = dict(model.named_parameters())
    modules = dict(model.named_modules())
    expected = set()
    for name in params:
        module = modules[name.rsplit(".", 1)[0]]
        if isinstance(module, MergedLinear):
            expected |= {f"{name}[{i}]" for i in range(len(module.out_sizes))}
        else:
            expected.add(name)
    loaded = set()
    for name, tensor in weights:
        if skip(name):
            continue
        tensor = transform(name, tensor)
        target, shard = stacked_key(name, stacking) or (name, None)
        if target not in params:
            raise ValueError(f"unexpected checkpoint tensor {name!r}")
        if shard is None:
            copy_checked(params[target].data, tensor, name)
            loaded.add(target)
        else:
            module_name, param_name = target.rsplit(".", 1)
            modules[module_name].load_shard(param_name, shard, tensor)
            loaded.add(f"{target}[{shard}]")
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
