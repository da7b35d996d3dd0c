"""``LoRAManager``: the adapter pool of one model runner.

Adapters live in host memory once loaded (``adapters``, by name); a batch's adapters are copied into
``max_loras_per_batch`` device slots, evicting the least recently used slot that the batch does not
need. Each load gets a fresh radix-cache namespace, so KV computed under one adapter (or under an
earlier load of the same name) is never served to another.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from radixlm.runtime.lora.adapter import LoRAAdapter, load_adapter
from radixlm.runtime.lora.batch_plan import LoRABatch
from radixlm.runtime.lora.layer import LoRALinear
from radixlm.runtime.lora.targets import TARGETS, normalize_targets, projection_shapes
from radixlm.runtime.models.config import ModelConfig


class LoRAManager:
    """Wraps the model's targeted projections in ``LoRALinear`` and feeds them per batch."""

    def __init__(
        self,
        model: nn.Module,
        cfg: ModelConfig,
        max_loras_per_batch: int,
        max_lora_rank: int,
        target_modules: frozenset[str],
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        if max_loras_per_batch < 1 or max_lora_rank < 1:
            raise ValueError("--max-loras-per-batch and --max-lora-rank must be >= 1")
        self.cfg, self.dtype, self.device = cfg, dtype, device
        self.num_slots, self.max_rank = max_loras_per_batch, max_lora_rank
        self.target_modules = target_modules
        self.shapes = projection_shapes(cfg)
        self.batch = LoRABatch(device)
        self.layers = _wrap(model, target_modules, self.shapes, max_loras_per_batch, self.batch)
        self.adapters: dict[str, LoRAAdapter] = {}
        self.namespace: dict[int, int] = {}  # id(adapter) -> radix namespace
        self._namespaces = itertools.count(1)
        self.slot_adapter: list[LoRAAdapter | None] = [None] * max_loras_per_batch
        self.slot_used = [0.0] * max_loras_per_batch
        self.load_seconds: list[float] = []

    # ---- the host pool ----------------------------------------------------------------------------
    def load(self, name: str, path: str | Path) -> LoRAAdapter:
        """Read, validate and register an adapter; ``ValueError`` for a taken name or a bad adapter."""
        if not name or ":" in name:
            raise ValueError(f"LoRA adapter name {name!r} must be non-empty and contain no ':'")
        if name in self.adapters:
            raise ValueError(f"LoRA adapter {name!r} is already loaded (unload it first)")
        start = time.perf_counter()
        adapter = load_adapter(name, path, self.cfg, self.max_rank, self.target_modules)
        self.adapters[name] = adapter
        self.namespace[id(adapter)] = next(self._namespaces)
        self.load_seconds.append(time.perf_counter() - start)
        return adapter

    def unload(self, name: str) -> None:
        """Forget ``name`` for new requests; requests already holding it finish with it (its slot is
        reclaimed once no batch needs it)."""
        if self.adapters.pop(name, None) is None:
            raise ValueError(f"LoRA adapter {name!r} is not loaded")

    def get(self, name: str) -> LoRAAdapter:
        adapter = self.adapters.get(name)
        if adapter is None:
            raise ValueError(f"LoRA adapter {name!r} is not loaded (loaded: {sorted(self.adapters)})")
        return adapter

    def namespace_of(self, adapter: LoRAAdapter | None) -> int:
        """The radix-cache namespace of requests under ``adapter`` (0: the base model)."""
        return 0 if adapter is None else self.namespace[id(adapter)]

    # ---- the device slots -------------------------------------------------------------------------
    def assign(self, adapters: Sequence[LoRAAdapter | None]) -> list[int]:
        """Device slots for a batch's per-request adapters (-1: the base model), loading any that are
        not resident into the least recently used slots this batch does not need."""
        wanted = list(dict.fromkeys(a for a in adapters if a is not None))
        if len(wanted) > self.num_slots:
            raise ValueError(
                f"{len(wanted)} LoRA adapters in one batch > --max-loras-per-batch {self.num_slots}"
            )
        now = time.monotonic()
        slot_of: dict[int, int] = {}
        for slot, resident in enumerate(self.slot_adapter):
            if resident is not None and resident in wanted:
                slot_of[id(resident)] = slot
        free = sorted(
            (s for s in range(self.num_slots) if s not in slot_of.values()), key=lambda s: self.slot_used[s]
        )
        for adapter in wanted:
            if id(adapter) not in slot_of:
                slot = free.pop(0)
                self._fill(slot, adapter)
                slot_of[id(adapter)] = slot
        for slot in slot_of.values():
            self.slot_used[slot] = now
        return [-1 if a is None else slot_of[id(a)] for a in adapters]

    def _fill(self, slot: int, adapter: LoRAAdapter) -> None:
        per_layer: dict[tuple[int, str], dict[int, tuple[torch.Tensor, torch.Tensor]]] = {}
        for (layer, module), (a, b) in adapter.weights.items():
            path, index = TARGETS[module]
            on = dict(device=self.device, dtype=self.dtype)
            per_layer.setdefault((layer, path), {})[index] = (a.to(**on), b.to(**on))
        for key, wrapped in self.layers.items():
            wrapped.set_slot(slot, per_layer.get(key))
        self.slot_adapter[slot] = adapter

    def begin(self, slots: Sequence[int] | None, tokens_per_req: Sequence[int]) -> None:
        """Plan the next forward's adapter rows once for all layers (``LoRABatch.plan``): request ``i``
        has ``tokens_per_req[i]`` consecutive tokens under slot ``slots[i]``."""
        self.batch.plan(slots, tokens_per_req)

    def info(self) -> list[dict]:
        """The loaded adapters, as ``/v1/models`` and ``/get_server_info`` list them."""
        return [
            {"name": a.name, "path": a.path, "rank": a.rank, "target_modules": sorted(a.target_modules)}
            for a in self.adapters.values()
        ]


def _wrap(
    model: nn.Module, targets: frozenset[str], shapes: dict, num_slots: int, batch: LoRABatch
) -> dict[tuple[int, str], LoRALinear]:
    """Replace each targeted fused projection of every decoder layer by a ``LoRALinear`` over it."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        raise ValueError(f"LoRA serving needs a decoder-layer model; {type(model).__name__} has none")
    paths: dict[str, list[str]] = {}
    for module in sorted(targets):
        path, _ = TARGETS[module]
        paths.setdefault(path, [m for m, (p, _) in TARGETS.items() if p == path])
    wrapped: dict[tuple[int, str], LoRALinear] = {}
    for layer_id, layer in enumerate(layers):
        for path, modules in paths.items():
            parent_name, attr = path.split(".")
            parent = getattr(layer, parent_name)
            base = getattr(parent, attr, None)
            if base is None or isinstance(base, LoRALinear):
                raise ValueError(
                    f"layer {layer_id} has no {path} to apply LoRA to (not a Llama-family layout?)"
                )
            sizes = [shapes[m].out_features for m in modules]
            lora = LoRALinear(base, sizes, num_slots, batch)
            setattr(parent, attr, lora)
            wrapped[(layer_id, path)] = lora
    return wrapped


def build_lora_manager(
    server_args: Any, model: nn.Module, dtype: torch.dtype, device: torch.device
) -> LoRAManager | None:
    """The runner's adapter pool with ``--lora-paths`` loaded, or None without ``--enable-lora``."""
    if not server_args.enable_lora:
        return None
    cfg = getattr(model, "config", None)
    if not isinstance(cfg, ModelConfig):
        raise ValueError(f"LoRA serving needs a native Llama-family model, not {type(model).__name__}")
    targets = normalize_targets(server_args.lora_target_modules or ("all",))
    manager = LoRAManager(
        model, cfg, server_args.max_loras_per_batch, server_args.max_lora_rank, targets, dtype, device
    )
    for spec in server_args.lora_paths:
        name, sep, path = spec.partition("=")
        if not sep:
            name, path = Path(spec).name, spec
        manager.load(name, path)
    return manager
