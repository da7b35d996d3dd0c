"""A PEFT LoRA adapter written as a GGUF LoRA file in the layout of llama.cpp's ``convert_lora_to_gguf.py``.

The converter runs the base architecture's tensor mapping over LoRA pairs: each PEFT
``...layers.{i}.self_attn.q_proj.lora_A.weight`` / ``lora_B`` pair becomes
``blk.{i}.attn_q.weight.lora_a`` (``A`` as PEFT stores it, ``[r, in]``) and ``...lora_b`` (``B``,
``[out, r]``); for Llama the q/k permutation of the base rows applies to ``B``'s rows (``A`` has none).
Metadata: ``general.architecture``, ``general.type = adapter``, ``adapter.type = lora`` and
``adapter.lora.alpha`` (float32) from the PEFT config's ``lora_alpha``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from tests.helpers.gguf_writer import llamacpp_permute

_GGUF_NAMES = {
    "q_proj": "attn_q",
    "k_proj": "attn_k",
    "v_proj": "attn_v",
    "o_proj": "attn_output",
    "gate_proj": "ffn_gate",
    "up_proj": "ffn_up",
    "down_proj": "ffn_down",
}
_PEFT_KEY = re.compile(r"layers\.(\d+)\.(?:self_attn|mlp)\.(\w+)\.lora_([AB])\.weight$")


def save_gguf_lora(
    peft_dir: str | Path,
    base_config: dict,
    path: str | Path,
    arch: str = "llama",
    tensor_type: str = "F32",
    extra_tensors: dict[str, np.ndarray] | None = None,
    omit: frozenset[str] = frozenset(),
    with_alpha: bool = True,
) -> Path:
    """Write the PEFT adapter in ``peft_dir`` (for a base with HF config dict ``base_config``) as a GGUF
    LoRA file at ``path``; ``tensor_type`` ``F32``, ``F16`` or ``Q8_0`` (the converter's outtypes);
    ``extra_tensors`` (GGUF name -> array) are written as they are and ``omit`` (GGUF names) left out,
    for bad-file tests; ``with_alpha=False`` leaves ``adapter.lora.alpha`` out."""
    import gguf
    from safetensors.torch import load_file

    cfg = json.loads((Path(peft_dir) / "adapter_config.json").read_text())
    heads = {"q_proj": base_config["num_attention_heads"], "k_proj": base_config["num_key_value_heads"]}
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    if with_alpha:
        writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(cfg["lora_alpha"]))
    for key, tensor in sorted(load_file(str(Path(peft_dir) / "adapter_model.safetensors")).items()):
        m = _PEFT_KEY.search(key)
        assert m is not None, key
        layer, module, ab = m.groups()
        array = tensor.float().numpy()
        if ab == "B" and arch == "llama" and module in heads:
            array = llamacpp_permute(array, heads[module])
        name = f"blk.{layer}.{_GGUF_NAMES[module]}.weight.lora_{ab.lower()}"
        if name in omit:
            continue
        _add(writer, name, array, tensor_type)
    for name, array in (extra_tensors or {}).items():
        _add(writer, name, array, tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(path)


def _add(writer, name: str, array: np.ndarray, tensor_type: str) -> None:
    import gguf

    array = np.ascontiguousarray(array, dtype=np.float32)
    if tensor_type == "F32":
        writer.add_tensor(name, array)
    elif tensor_type == "F16":
        writer.add_tensor(name, array.astype(np.float16))
    else:
        qtype = gguf.GGMLQuantizationType[tensor_type]
        writer.add_tensor(name, gguf.quants.quantize(array, qtype), raw_dtype=qtype)
