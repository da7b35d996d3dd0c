"""Convert a GGUF file into a Hugging Face-style directory (fp32 safetensors + tokenizer).

Weights are dequantized with ``gguf`` directly (seconds), not through transformers' GGUF loader.
The tokenizer and its chat template come from the GGUF metadata through transformers.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from gguf import GGUFReader
from gguf.quants import dequantize
from safetensors.torch import save_file

from radixlm.runtime.weights.gguf_config import GGUF_ARCHITECTURES, gguf_architecture, hf_config_from_gguf
from radixlm.runtime.weights.gguf_mapping import hf_tensor_name, unpermute_rope


def gguf_state_dict(reader: GGUFReader, config: dict) -> dict[str, torch.Tensor]:
    """All tensors of the GGUF file as fp32 torch tensors under their Hugging Face names."""
    permuted = GGUF_ARCHITECTURES[gguf_architecture(reader)][2]
    heads = {"q_proj": config["num_attention_heads"], "k_proj": config["num_key_value_heads"]}
    state: dict[str, torch.Tensor] = {}
    for tensor in reader.tensors:
        name = hf_tensor_name(tensor.name)
        if name is None:
            continue
        array = dequantize(tensor.data, tensor.tensor_type).astype("float32", copy=False)
        proj = name.split(".")[-2]
        if permuted and proj in heads:
            array = unpermute_rope(array, heads[proj])
        state[name] = torch.from_numpy(array.copy())
    return state


def _save_tokenizer(gguf_path: Path, out_dir: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    tokenizer.save_pretrained(str(out_dir))


def convert_gguf(gguf_path: str | Path, out_dir: str | Path) -> None:
    """Write ``config.json``, ``generation_config.json``, ``model.safetensors`` (fp32, HF names,
    no ``lm_head.weight`` when embeddings are tied) and the tokenizer files into ``out_dir``."""
    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    reader = GGUFReader(str(gguf_path))
    config = hf_config_from_gguf(reader)
    save_file(gguf_state_dict(reader, config), str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    del reader
    generation = {k: config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if k in config}
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    (out_dir / "generation_config.json").write_text(json.dumps(generation, indent=2))
    _save_tokenizer(gguf_path, out_dir)
