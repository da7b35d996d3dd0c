"""A LoRA adapter read from disk (a PEFT directory: ``adapter_config.json`` + ``adapter_model.safetensors``;
or a GGUF LoRA file, ``gguf_adapter.py``) and checked against the base model it is to serve.

Each targeted projection keeps ``A`` ``[r, in]`` and ``B * scale`` ``[out, r]`` (the scale folded into
``B`` once here, so the serving product is two matmuls and an add). ``scale`` is ``lora_alpha / r``,
or ``lora_alpha / sqrt(r)`` with ``use_rslora``; per-module ``rank_pattern``/``alpha_pattern`` are
honoured through the tensors' own rank and the pattern's alpha. A GGUF file's scale is
``adapter.lora.alpha / r`` (1 without an alpha, as llama.cpp applies it).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from radixlm.runtime.lora.gguf_adapter import Pairs, read_gguf_lora
from radixlm.runtime.lora.targets import TARGETS, projection_shapes
from radixlm.runtime.models.config import ModelConfig

_KEY = re.compile(r"(?:^|\.)layers\.(\d+)\.(?:self_attn|mlp)\.(\w+)\.lora_([AB])(?:\.default)?\.weight$")
_UNSUPPORTED = {"use_dora": "DoRA", "fan_in_fan_out": "fan_in_fan_out weights"}


@dataclass(eq=False)
class LoRAAdapter:
    """One adapter in host memory: ``weights[(layer, peft_module)] = (A, B_scaled)`` on the CPU."""

    name: str
    path: str
    rank: int
    target_modules: frozenset[str]
    weights: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)

    def nbytes(self) -> int:
        return sum(
            a.numel() * a.element_size() + b.numel() * b.element_size() for a, b in self.weights.values()
        )


def load_adapter(
    name: str, path: str | Path, cfg: ModelConfig, max_rank: int, allowed_targets: frozenset[str]
) -> LoRAAdapter:
    """Read and validate the adapter at ``path`` (a PEFT directory, or a GGUF LoRA file as llama.cpp
    writes it) for base ``cfg``; ``ValueError`` naming the adapter and the problem (missing or corrupt
    files, unsupported options, rank over ``max_rank``, a target outside ``allowed_targets`` or one the
    base lacks, tensor shapes made for another base)."""
    where = f"LoRA adapter {name!r} ({path})"
    if Path(path).is_file():
        pairs, gguf_alpha = read_gguf_lora(Path(path), where, cfg)

        def scale(layer: int, module: str, rank: int) -> float:
            return gguf_alpha / rank if gguf_alpha else 1.0  # llama.cpp: no alpha, no scaling

    else:
        pairs, scale = _read_peft(Path(path), where)
    shapes = projection_shapes(cfg)
    for layer, module in pairs:
        if module not in TARGETS:
            raise ValueError(f"{where}: target module {module!r} is not one the base model supports")
        if module not in allowed_targets:
            raise ValueError(
                f"{where}: target module {module!r} is outside --lora-target-modules "
                f"{sorted(allowed_targets)}"
            )
        if layer >= cfg.num_layers:
            raise ValueError(f"{where}: layer {layer} but the base model has {cfg.num_layers} layers")
    if not pairs:
        raise ValueError(f"{where}: no LoRA weights found")
    weights: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]] = {}
    max_seen = 0
    for (layer, module), ab in sorted(pairs.items()):
        if set(ab) != {"A", "B"}:
            raise ValueError(
                f"{where}: layer {layer} {module} lacks its lora_{'B' if 'A' in ab else 'A'} tensor"
            )
        a, b, shape = ab["A"], ab["B"], shapes[module]
        rank = a.shape[0]
        if (
            a.dim() != 2
            or b.dim() != 2
            or tuple(a.shape) != (rank, shape.in_features)
            or tuple(b.shape) != (shape.out_features, rank)
        ):
            raise ValueError(
                f"{where}: layer {layer} {module} has A {tuple(a.shape)} and B {tuple(b.shape)}, but this "
                f"base needs A [r, {shape.in_features}] and B [{shape.out_features}, r]: "
                "an adapter for another base model?"
            )
        if rank > max_rank:
            raise ValueError(f"{where}: rank {rank} exceeds --max-lora-rank {max_rank}")
        max_seen = max(max_seen, rank)
        b_scaled = b.float() * scale(layer, module, rank)
        weights[(layer, module)] = (a.float().contiguous(), b_scaled.contiguous())
    targets = frozenset(module for _, module in weights)
    return LoRAAdapter(name, str(path), max_seen, targets, weights)


def _read_peft(path: Path, where: str) -> tuple[Pairs, Callable[[int, str, int], float]]:
    """A PEFT directory's LoRA pairs and its per-module scaling (``lora_alpha``, ``alpha_pattern``,
    ``use_rslora``)."""
    cfg = _read_config(path, where)
    tensors = _read_tensors(path, where)
    for key, what in _UNSUPPORTED.items():
        if cfg.get(key):
            raise ValueError(f"{where}: {what} is not supported")
    if cfg.get("bias", "none") != "none":
        raise ValueError(f"{where}: trained biases (bias={cfg['bias']!r}) are not supported")
    pairs: Pairs = {}
    for key, tensor in tensors.items():
        m = _KEY.search(key)
        if m is None:
            raise ValueError(f"{where}: unexpected tensor {key!r} (only q/k/v/o and gate/up/down LoRA pairs)")
        pairs.setdefault((int(m.group(1)), m.group(2)), {})[m.group(3)] = tensor
    alpha = float(cfg.get("lora_alpha", cfg.get("r", 8)))
    alpha_pattern: dict[str, float] = cfg.get("alpha_pattern") or {}
    rslora = bool(cfg.get("use_rslora"))

    def scale(layer: int, module: str, rank: int) -> float:
        a_module = _pattern_value(alpha_pattern, layer, module, alpha)
        return a_module / math.sqrt(rank) if rslora else a_module / rank

    return pairs, scale


def _pattern_value(pattern: dict[str, float], layer: int, module: str, default: float) -> float:
    """PEFT's ``alpha_pattern``: the first key whose regex ends the module's full name wins."""
    full = f"model.layers.{layer}.{module}"
    for key, value in pattern.items():
        if re.match(rf"(.*\.)?({key})$", full) or full.endswith(key):
            return float(value)
    return default


def _read_config(path: Path, where: str) -> dict:
    file = path / "adapter_config.json"
    if not file.is_file():
        raise ValueError(f"{where}: no adapter_config.json (not a PEFT adapter directory)")
    try:
        cfg = json.loads(file.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{where}: corrupt adapter_config.json: {exc}") from exc
    if not isinstance(cfg, dict) or str(cfg.get("peft_type", "LORA")).upper() != "LORA":
        raise ValueError(f"{where}: adapter_config.json is not a LoRA config")
    return cfg


def _read_tensors(path: Path, where: str) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    st, bin_file = path / "adapter_model.safetensors", path / "adapter_model.bin"
    try:
        if st.is_file():
            return load_file(str(st))
        if bin_file.is_file():
            return torch.load(str(bin_file), map_location="cpu", weights_only=True)
    except (SafetensorError, OSError, RuntimeError, ValueError) as exc:
        raise ValueError(f"{where}: corrupt adapter weights: {exc}") from exc
    raise ValueError(f"{where}: no adapter_model.safetensors")
