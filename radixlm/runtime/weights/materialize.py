"""Build a model without allocating its weights, then give each module its weights as they arrive.

``parameters_on_meta`` creates every parameter on the meta device (buffers such as rotary tables stay
real); ``ModuleAssembler`` is the ``ParamSink`` the loader installs: it collects each module's
checkpoint tensors and, once all have arrived, hands them to a build function (float parameters, or a
quantized module in its place). So at most one module's float weights exist besides the served model.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import nn

from radixlm.runtime.layers.linear import copy_checked
from radixlm.runtime.models.weight_loading import Shard, piece_key
from radixlm.runtime.weights.source import BlockTensor, StoredTensor, as_float

# a module's received tensors: (parameter name, piece of a fused or stacked parameter or None) -> tensor
Parts = dict[tuple[str, Shard | None], StoredTensor]
# (root model, module name, module, its tensors) -> a module to put in its place, or None to keep it
BuildModule = Callable[[nn.Module, str, nn.Module, Parts], nn.Module | None]


@contextlib.contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Parameters registered inside the block live on the meta device (shape and dtype only)."""
    original = nn.Module.register_parameter

    def register(self: nn.Module, name: str, param: nn.Parameter | None) -> None:
        if param is not None and param.device.type != "meta":
            param = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        original(self, name, param)

    nn.Module.register_parameter = register  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.register_parameter = original  # type: ignore[method-assign]


def set_module(root: nn.Module, name: str, new: nn.Module) -> None:
    """Put ``new`` at dotted path ``name`` of ``root``."""
    parent_name, _, leaf = name.rpartition(".")
    setattr(root.get_submodule(parent_name) if parent_name else root, leaf, new)


def _shard_view(module: nn.Module, param_name: str, shard: Shard | None, data: torch.Tensor) -> torch.Tensor:
    """The part of ``data`` (the parameter's full tensor) that checkpoint piece ``shard`` fills."""
    if shard is None:
        return data
    if isinstance(shard, tuple):  # (expert, part) of stacked experts
        return module.shard_view(param_name, shard, data)
    sizes = module.out_sizes  # a MergedLinear's row blocks
    return data.narrow(0, sum(sizes[:shard]), sizes[shard])


@torch.no_grad()
def materialize(module: nn.Module, parts: Parts, device: torch.device) -> None:
    """Give ``module``'s meta parameters real storage on ``device`` filled from ``parts`` (their dtype
    is the serving dtype the model was built in; stored tensors are converted one at a time)."""
    for param_name, param in list(module.named_parameters(recurse=False)):
        if param.device.type != "meta":
            continue
        data = torch.empty(param.shape, dtype=param.dtype, device=device)
        for (name, shard), stored in parts.items():
            if name != param_name:
                continue
            dst = _shard_view(module, param_name, shard, data)
            copy_checked(dst, as_float(stored), param_name if shard is None else piece_key(param_name, shard))
            if isinstance(stored, BlockTensor):
                stored.release()
        setattr(module, param_name, nn.Parameter(data, requires_grad=False))


class ModuleAssembler:
    """Collects tensors per module (``ParamSink``) and builds each module when it is complete."""

    def __init__(self, build: BuildModule) -> None:
        self._build = build
        self._model: nn.Module | None = None
        self._pending: dict[str, Parts] = {}
        self._remaining: dict[str, set[str]] = {}

    def expect(self, model: nn.Module, expected: set[str]) -> None:
        self._model = model
        for key in expected:
            self._remaining.setdefault(key.split("[")[0].rpartition(".")[0], set()).add(key)

    def receive(self, key: str, target: str, shard: Shard | None, tensor: StoredTensor) -> None:
        assert self._model is not None, "expect() comes first"
        module_name, _, param_name = target.rpartition(".")
        module = self._model.get_submodule(module_name)
        want = tuple(_shard_view(module, param_name, shard, getattr(module, param_name)).shape)
        if tuple(tensor.shape) != want:
            raise ValueError(f"weight {key}: checkpoint shape {tuple(tensor.shape)} != model shape {want}")
        remaining = self._remaining.get(module_name, set())
        # a whole fused tensor (e.g. all experts at once) stands for all of its pieces
        if key in remaining:
            covered = {key}
        else:  # a whole fused tensor (e.g. all experts at once) stands for all of its pieces
            covered = {k for k in remaining if k.split("[")[0] == target} if shard is None else set()
        if not covered:
            raise ValueError(f"checkpoint tensor for {key} given twice")
        self._pending.setdefault(module_name, {})[(param_name, shard)] = tensor
        remaining -= covered
        if not remaining:
            parts = self._pending.pop(module_name)
            new = self._build(self._model, module_name, module, parts)
            if new is not None and new is not module:
                set_module(self._model, module_name, new)


def unloaded_parameters(model: nn.Module) -> list[str]:
    """Names of parameters still on the meta device (never given a checkpoint tensor)."""
    return [name for name, p in model.named_parameters() if p.device.type == "meta"]
