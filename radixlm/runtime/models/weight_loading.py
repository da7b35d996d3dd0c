"""Copy a checkpoint's Hugging Face-named tensors into a model's parameters, shared by every architecture.

A model whose fused parameters (``qkv_proj``, ``gate_up_proj``) stack several checkpoint tensors
passes the stacking table; every parameter must be set exactly as the checkpoint says (shape checked),
and a tensor the model has no place for is an error, never dropped silently. Mixture-of-experts
checkpoints name each expert's tensors (``...experts.{e}.gate_proj.weight``): ``expert_key`` maps them
onto the stacked ``Experts`` parameters, whose fused tensors (transformers 5's in-memory layout) also
load as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn

from radixlm.runtime.layers.linear import MergedLinear, copy_checked
from radixlm.runtime.layers.moe import Experts

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
    expected: dict[str, set[str]] = {}  # parameter -> the checkpoint pieces that set it
    for name in params:
        module_name, param_name = name.rsplit(".", 1)
        module = modules[module_name]
        if isinstance(module, MergedLinear):
            expected[name] = {f"{name}[{i}]" for i in range(len(module.out_sizes))}
        elif isinstance(module, Experts):
            expected[name] = {_piece(name, s) for s in module.shard_keys(param_name)}
        else:
            expected[name] = {name}
    loaded = set()
    for name, tensor in weights:
        if skip(name):
            continue
        tensor = transform(name, tensor)
        target, shard = expert_key(name) or stacked_key(name, stacking) or (name, None)
        if target not in params:
            raise ValueError(f"unexpected checkpoint tensor {name!r}")
        if shard is None:
            copy_checked(params[target].data, tensor, name)
            loaded |= expected[target]
        else:
            module_name, param_name = target.rsplit(".", 1)
            modules[module_name].load_shard(param_name, shard, tensor)
            loaded.add(_piece(target, shard))
    missing = sorted(set().union(*expected.values()) - loaded)
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


def _piece(target: str, shard: int | tuple[int, int]) -> str:
    return f"{target}[{shard}]" if isinstance(shard, int) else f"{target}[expert {shard[0]}][{shard[1]}]"
