"""``LoRAManager``: the adapter pool of one model runner.

Adapters live in host memory once loaded (``adapters``, by name); a batch's adapters are copied into
``max_loras_per_batch`` device slots, evicting the least recently used slot that the batch does not
need. Each load gets a fresh radix-cache namespace, so KV computed under one adapter (or under an
earlier load of the same name) is never served to another.

Under tensor parallelism every rank holds its share of each adapter (``rank_shard.py``) and its own
slots. Rank 0 decides: its loads and unloads reach the other ranks through ``broadcast`` (each rank
loads the adapter; one failing refuses it on all), and the slots it fills and the namespaces of
adapters it no longer holds travel with the next batch (``take_sync``/``apply_sync``).
"""

from __future__ import annotations

import itertools
import logging
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from radixlm.runtime.distributed.partition import TPShard
from radixlm.runtime.layers.parallel_linear import RowParallelLinear
from radixlm.runtime.lora.adapter import LoRAAdapter, load_adapter
from radixlm.runtime.lora.batch_plan import LoRABatch
from radixlm.runtime.lora.layer import LoRALinear
from radixlm.runtime.lora.rank_shard import rank_slices, shard_adapter
from radixlm.runtime.lora.targets import TARGETS, normalize_targets, projection_shapes
from radixlm.runtime.models.config import ModelConfig

logger = logging.getLogger(__name__)
# rank 0 -> the other ranks: a load or unload op; returns whether every rank applied it
Broadcast = Callable[[dict], bool]


@dataclass
class LoRASync:
    """What the other tensor-parallel ranks need with a batch: its plan (``slots`` per request, -1 the
    base, and ``tokens`` per request), the slots rank 0 filled since the last batch as
    ``(slot, namespace)``, and the namespaces of adapters rank 0 has dropped for good."""

    slots: list[int]
    tokens: list[int]
    fills: list[tuple[int, int]]
    drops: list[int]


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
        shard: TPShard | None = None,
        max_loaded: int | None = None,
    ) -> None:
        """``shard``: this tensor-parallel rank (None: one process serves the whole model).
        ``max_loaded``: how many adapters the host pool holds at once (None: no bound)."""
        if max_loras_per_batch < 1 or max_lora_rank < 1:
            raise ValueError("--max-loras-per-batch and --max-lora-rank must be >= 1")
        self.cfg, self.dtype, self.device = cfg, dtype, device
        self.num_slots, self.max_rank = max_loras_per_batch, max_lora_rank
        self.target_modules = target_modules
        self.max_loaded = max_loaded
        self.shard = shard
        self.slices = rank_slices(cfg, shard) if shard is not None and shard.size > 1 else None
        out_features = {m: s.out_features for m, s in projection_shapes(cfg).items()}
        if self.slices is not None:
            out_features = {m: s.out_features for m, s in self.slices.items()}
        self.batch = LoRABatch(device)
        self.layers = _wrap(model, target_modules, out_features, max_loras_per_batch, self.batch)
        self.adapters: dict[str, LoRAAdapter] = {}
        self.namespace: dict[int, int] = {}  # id(adapter) -> radix namespace
        self._namespaces = itertools.count(1)
        self.slot_adapter: list[LoRAAdapter | None] = [None] * max_loras_per_batch
        self.slot_used = [0.0] * max_loras_per_batch
        self.load_seconds: list[float] = []
        # tensor parallelism: rank 0 sends ops through ``broadcast`` (set once the ranks serve) and
        # collects ``fills``/``drops``; the other ranks find rank 0's adapters by namespace
        self.broadcast: Broadcast | None = None
        self.fills: list[tuple[int, int]] = []
        self.drops: list[int] = []
        self.planned: tuple[list[int], list[int]] = ([], [])
        self.by_namespace: dict[int, LoRAAdapter] = {}

    @property
    def follower(self) -> bool:
        """A tensor-parallel rank > 0: it applies rank 0's decisions."""
        return self.shard is not None and self.shard.rank > 0

    # ---- the host pool ----------------------------------------------------------------------------
    def load(self, name: str, path: str | Path, namespace: int | None = None) -> LoRAAdapter:
        """Read, validate and register an adapter; ``ValueError`` for a taken name or a bad adapter.
        Rank 0 under tensor parallelism has every rank load it, and refuses it if one cannot.
        ``namespace``: the one rank 0 gave it (ranks > 0), else the next one."""
        adapter = self._load_here(name, path, namespace)
        if self.broadcast is not None:
            op = {"op": "load", "name": name, "path": str(path), "namespace": self.namespace_of(adapter)}
            if not self.broadcast(op):
                self.adapters.pop(name)
                raise ValueError(
                    f"LoRA adapter {name!r} ({path}) could not be loaded on every tensor-parallel rank "
                    "(see the ranks' logs)"
                )
        return adapter

    def _load_here(self, name: str, path: str | Path, namespace: int | None) -> LoRAAdapter:
        if not name or ":" in name:
            raise ValueError(f"LoRA adapter name {name!r} must be non-empty and contain no ':'")
        if name in self.adapters:
            raise ValueError(f"LoRA adapter {name!r} is already loaded (unload it first)")
        if self.max_loaded is not None and len(self.adapters) >= self.max_loaded:
            raise ValueError(
                f"LoRA adapter {name!r} cannot be loaded: {len(self.adapters)} adapters are loaded, the "
                "--max-loaded-loras limit (unload one first)"
            )
        start = time.perf_counter()
        adapter = load_adapter(name, path, self.cfg, self.max_rank, self.target_modules)
        if self.slices is not None:
            shard_adapter(adapter, self.slices)
        ns = next(self._namespaces) if namespace is None else namespace
        self.adapters[name] = adapter
        self.namespace[id(adapter)] = ns
        if self.follower:
            self.by_namespace[ns] = adapter
        elif self.shard is not None:
            # once no request, slot or pool entry holds it, the other ranks may drop their share
            weakref.finalize(adapter, self._freed, id(adapter), ns)
        self.load_seconds.append(time.perf_counter() - start)
        return adapter

    def unload(self, name: str) -> None:
        """Forget ``name`` for new requests; requests already holding it finish with it (its slot is
        reclaimed once no batch needs it)."""
        if self.adapters.pop(name, None) is None:
            raise ValueError(f"LoRA adapter {name!r} is not loaded")
        if self.broadcast is not None and not self.broadcast({"op": "unload", "name": name}):
            logger.error("LoRA adapter %r was not loaded on every tensor-parallel rank", name)

    def apply_op(self, op: dict) -> bool:
        """A rank > 0: apply rank 0's load or unload; False (logged) when it fails here."""
        try:
            if op["op"] == "load":
                self._load_here(op["name"], op["path"], int(op["namespace"]))
            else:
                self.unload(op["name"])
        except ValueError:
            logger.exception("LoRA %s of %r failed on this tensor-parallel rank", op["op"], op["name"])
            return False
        return True

    def _freed(self, key: int, ns: int) -> None:
        """Rank 0's copy of the adapter of namespace ``ns`` (object id ``key``) is gone."""
        self.namespace.pop(key, None)
        self.drops.append(ns)

    def _drop(self, ns: int) -> None:
        """A rank > 0: forget its copy of rank 0's adapter of namespace ``ns``."""
        adapter = self.by_namespace.pop(ns, None)
        if adapter is not None:
            self.namespace.pop(id(adapter), None)

    def revert_load(self, name: str) -> None:
        """A rank > 0: undo a load another rank refused."""
        adapter = self.adapters.pop(name, None)
        if adapter is not None:
            self._drop(self.namespace_of(adapter))

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
        if self.shard is not None and not self.follower:
            self.fills.append((slot, self.namespace_of(adapter)))

    def begin(self, slots: Sequence[int] | None, tokens_per_req: Sequence[int]) -> None:
        """Plan the next forward's adapter rows once for all layers (``LoRABatch.plan``): request ``i``
        has ``tokens_per_req[i]`` consecutive tokens under slot ``slots[i]``."""
        self.planned = (list(slots or ()), list(tokens_per_req) if slots else [])
        self.batch.plan(slots, tokens_per_req)

    def take_sync(self) -> LoRASync:
        """Rank 0: the planned batch and the slot changes since the last one, for the other ranks."""
        # popped one by one, in place: the adapters' finalizers append to ``drops`` whenever they run
        drops = [self.drops.pop(0) for _ in range(len(self.drops))]
        sync = LoRASync(*self.planned, self.fills, drops)
        self.fills = []
        return sync

    def apply_sync(self, sync: LoRASync) -> None:
        """A rank > 0: mirror rank 0's slot fills and drops, then plan its batch."""
        for slot, ns in sync.fills:
            self._fill(slot, self.by_namespace[ns])
        for ns in sync.drops:
            self._drop(ns)
        self.begin(sync.slots or None, sync.tokens)

    def info(self) -> list[dict]:
        """The loaded adapters, as ``/v1/models`` and ``/get_server_info`` list them."""
        return [
            {"name": a.name, "path": a.path, "rank": a.rank, "target_modules": sorted(a.target_modules)}
            for a in self.adapters.values()
        ]


def _wrap(
    model: nn.Module, targets: frozenset[str], out_features: dict[str, int], num_slots: int, batch: LoRABatch
) -> dict[tuple[int, str], LoRALinear]:
    """Replace each targeted fused projection of every decoder layer by a ``LoRALinear`` over it (a
    row-parallel one's rank part, so the low-rank add joins the partial output before its all-reduce)."""
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
            sizes = [out_features[m] for m in modules]
            if isinstance(base, RowParallelLinear):
                parent, attr, base = base, "part", base.part
            lora = LoRALinear(base, sizes, num_slots, batch)
            setattr(parent, attr, lora)
            wrapped[(layer_id, path)] = lora
    return wrapped


def build_lora_manager(
    server_args: Any, model: nn.Module, dtype: torch.dtype, device: torch.device, shard: TPShard | None = None
) -> LoRAManager | None:
    """The runner's adapter pool with ``--lora-paths`` loaded (every rank loads them itself, in the same
    order), or None without ``--enable-lora``. ``shard``: this tensor-parallel rank."""
    if not server_args.enable_lora:
        return None
    cfg = getattr(model, "config", None)
    if not isinstance(cfg, ModelConfig):
        raise ValueError(f"LoRA serving needs a native Llama-family model, not {type(model).__name__}")
    targets = normalize_targets(server_args.lora_target_modules or ("all",))
    manager = LoRAManager(
        model,
        cfg,
        server_args.max_loras_per_batch,
        server_args.max_lora_rank,
        targets,
        dtype,
        device,
        shard,
        max_loaded=server_args.max_loaded_loras,
    )
    for spec in server_args.lora_paths:
        name, sep, path = spec.partition("=")
        if not sep:
            name, path = Path(spec).name, spec
        manager.load(name, path)
    return manager
