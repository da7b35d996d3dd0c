"""A LoRA adapter as llama.cpp writes it (``convert_lora_to_gguf.py``): one GGUF file read into the
same ``(layer, peft_module) -> {"A", "B"}`` pairs a PEFT directory gives.

The file's metadata says ``general.type = adapter``, ``adapter.type = lora``, the base's
``general.architecture`` and ``adapter.lora.alpha``; each targeted base tensor ``blk.{i}.attn_q.weight``
has ``...weight.lora_a`` (``[r, in]`` rows, PEFT's ``A``) and ``...weight.lora_b`` (``[out, r]``, PEFT's
``B``). For architectures whose base q/k rows llama.cpp permutes (Llama), the converter permutes
``lora_b``'s rows the same way; they are un-permuted here, as the base weights are.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch
from gguf.quants import dequantize

from radixlm.runtime.lora.targets import TARGETS
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.weights.gguf_config import GGUF_ARCHITECTURES, gguf_field
from radixlm.runtime.weights.gguf_mapping import hf_tensor_name, unpermute_rope
from radixlm.runtime.weights.gguf_source import open_gguf

_LORA_TENSOR = re.compile(r"^(.+)\.lora_([ab])$")
_HF_PROJECTION = re.compile(r"^model\.layers\.(\d+)\.(?:self_attn|mlp)\.(\w+)\.weight$")
# HF architectures llama.cpp's converter writes under another GGUF architecture name
_GGUF_ARCH_ALIASES = {"MistralForCausalLM": "llama"}

Pairs = dict[tuple[int, str], dict[str, torch.Tensor]]


def base_gguf_architecture(cfg: ModelConfig) -> str | None:
    """The ``general.architecture`` llama.cpp gives the base model, or None if it has none."""
    by_hf = {hf_arch: arch for arch, (hf_arch, _, _) in GGUF_ARCHITECTURES.items()}
    return by_hf.get(cfg.architecture) or _GGUF_ARCH_ALIASES.get(cfg.architecture)


def read_gguf_lora(path: Path, where: str, cfg: ModelConfig) -> tuple[Pairs, float]:
    """The LoRA pairs of the GGUF adapter file ``path`` for base ``cfg`` and its ``adapter.lora.alpha``
    (0.0 when absent: llama.cpp then applies the pairs unscaled). ``ValueError`` (prefixed ``where``)
    for a file that is not a LoRA adapter GGUF, one for another architecture, or tensors other than
    LoRA pairs on the decoder layers' projections."""
    try:
        reader = open_gguf(str(path))
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from exc
    if (kind := gguf_field(reader, "general.type")) != "adapter":
        raise ValueError(f"{where}: not a GGUF adapter file (general.type is {kind!r}, not 'adapter')")
    if (kind := gguf_field(reader, "adapter.type")) != "lora":
        raise ValueError(f"{where}: adapter.type is {kind!r}; only 'lora' adapters are supported")
    arch, base_arch = gguf_field(reader, "general.architecture"), base_gguf_architecture(cfg)
    if base_arch is None:
        raise ValueError(f"{where}: GGUF LoRA files are not supported for a {cfg.architecture} base model")
    if arch != base_arch:
        raise ValueError(
            f"{where}: the adapter is for architecture {arch!r}, the base model is {base_arch!r}"
        )
    permuted = GGUF_ARCHITECTURES[base_arch][2]
    heads = {"q_proj": cfg.num_heads, "k_proj": cfg.num_kv_heads}
    pairs: Pairs = {}
    for t in reader.tensors:
        m = _LORA_TENSOR.match(t.name)
        if m is None:
            raise ValueError(
                f"{where}: tensor {t.name!r} is not a lora_a/lora_b tensor (trained norms or other base "
                "weights in an adapter are not supported)"
            )
        try:
            hf_name = hf_tensor_name(m.group(1), base_arch)
        except ValueError as exc:
            raise ValueError(f"{where}: tensor {t.name!r}: {exc}") from exc
        proj = _HF_PROJECTION.match(hf_name or "")
        if proj is None or proj.group(2) not in TARGETS:
            raise ValueError(
                f"{where}: tensor {t.name!r} is LoRA on {m.group(1)!r}; only the decoder layers' q/k/v/o and "
                "gate/up/down projections are supported"
            )
        try:
            array = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        except (NotImplementedError, ValueError) as exc:
            what = f"{where}: tensor {t.name!r} ({t.tensor_type.name})"
            raise ValueError(f"{what} is unreadable: {exc}") from exc
        layer, module, ab = int(proj.group(1)), proj.group(2), m.group(2).upper()
        n_heads = heads.get(module) if permuted and ab == "B" else None
        if n_heads and array.ndim == 2 and array.shape[0] % (2 * n_heads) == 0:
            array = unpermute_rope(array, n_heads)
        pairs.setdefault((layer, module), {})[ab] = torch.from_numpy(np.array(array, copy=True))
    alpha = gguf_field(reader, "adapter.lora.alpha")
    return pairs, float(alpha) if alpha is not None else 0.0
