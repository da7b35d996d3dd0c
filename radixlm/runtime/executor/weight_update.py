"""Replace a loaded model's weights with another checkpoint's, in place (``/update_weights_from_disk``).

The new checkpoint is loaded whole beside the old one (twice the weight memory for a moment), checked
to have the same architecture and the same tensors (names, shapes, dtypes: ``served_tensors``), then
served in place of the old model; under captured CUDA graphs or deterministic inference, which hold
the served tensors, it is copied into them instead (their storage stays put). A mismatch leaves
the old weights untouched.
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING

import torch

from radixlm.runtime.layers.half_weights import add_half_weights_if_asked
from radixlm.runtime.layers.packed_weights import pack_model_weights, repack_weights
from radixlm.runtime.weights.loader import load_model

if TYPE_CHECKING:
    from radixlm.runtime.executor.model_runner import ModelRunner

LOAD_FORMATS = (None, "auto", "safetensors", "gguf")


def check_load_format(model_path: str, load_format: str | None) -> None:
    """Raise ValueError when ``load_format`` is unknown or does not fit ``model_path``."""
    if load_format not in LOAD_FORMATS:
        raise ValueError(f"load_format {load_format!r} is not supported; use auto, safetensors or gguf")
    is_gguf = model_path.endswith(".gguf")
    if load_format == "gguf" and not is_gguf:
        raise ValueError(f"load_format 'gguf' needs a .gguf file, got {model_path!r}")
    if load_format == "safetensors" and is_gguf:
        raise ValueError(f"load_format 'safetensors' needs a Hugging Face directory, got {model_path!r}")


@torch.inference_mode()
def update_weights_from_disk(runner: ModelRunner, model_path: str, load_format: str | None) -> str:
    """Load ``model_path`` into ``runner.model``; returns a message saying what was loaded.

    Raises ValueError naming the problem (unknown format, missing path, another architecture, a
    tensor of another name/shape/dtype) before anything of the served model changed.
    """
    if runner.tp is not None:
        raise ValueError("updating weights under tensor parallelism is not supported: restart the server")
    check_load_format(model_path, load_format)
    if not os.path.exists(model_path):
        raise ValueError(f"model_path {model_path!r} does not exist")
    old = runner.loaded
    new = load_model(
        model_path,
        runner.device,
        runner.dtype,
        tokenizer=old.tokenizer_path,
        context_length=runner.context_length,
        quantization=old.quantization,
        model_impl=old.model_impl,
        config_overrides=runner.server_args.model_overrides(),
        mmproj=old.mmproj_path,  # a new language model GGUF keeps the served projector
    )
    if new.architecture != old.architecture:
        raise ValueError(
            f"the checkpoint's architecture {new.architecture} differs from the served {old.architecture}"
        )
    served, loaded = served_tensors(runner.model), served_tensors(new.model)
    if served.keys() != loaded.keys():
        extra, missing = sorted(loaded.keys() - served.keys()), sorted(served.keys() - loaded.keys())
        raise ValueError(f"the checkpoint's tensors differ: missing {missing[:5]}, unexpected {extra[:5]}")
    for name, tensor in served.items():
        other = loaded[name]
        if other.shape != tensor.shape or other.dtype != tensor.dtype:
            raise ValueError(
                f"tensor {name} is {tuple(other.shape)} {other.dtype} in the checkpoint but "
                f"{tuple(tensor.shape)} {tensor.dtype} in the served model"
            )
    if runner.cuda_graph_runner is None and not runner.server_args.enable_deterministic_inference:
        # NOTE: swapped, not copied: GGUF blocks are read-only views of the file's mapping
        add_half_weights_if_asked(runner.server_args.encoder_fp16_weights, new.model)
        if not runner.server_args.disable_weight_packing:
            pack_model_weights(new.model)
        runner.model = new.model
        runner.loaded = dataclasses.replace(old, model=new.model, model_path=new.model_path)
    elif old.model_path.endswith(".gguf") and runner.device.type == "cpu":
        raise ValueError("a GGUF model under deterministic inference cannot be updated: restart the server")
    else:  # captured graphs and the deterministic forward point at the served tensors: copy into them
        for name, tensor in served.items():
            tensor.copy_(loaded[name])
        add_half_weights_if_asked(runner.server_args.encoder_fp16_weights, runner.model)
        repack_weights(runner.model)
        runner.loaded = dataclasses.replace(old, model_path=new.model_path)
    return f"loaded {len(served)} tensors from {new.model_path}"


def served_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every tensor a forward reads, by name: parameters, buffers (non-persistent ones too: GGUF
    blocks) and public plain tensor attributes (a quantized layer's bias). Not the packed, fp16 and
    panel copies, renewed from the weights, nor "_" attributes: caches (the positions a rotary layer
    checked)."""
    found: dict[str, torch.Tensor] = {}
    for prefix, module in model.named_modules():
        tensors = dict(module.named_parameters(recurse=False))
        tensors.update(module.named_buffers(recurse=False))
        tensors.update((k, v) for k, v in vars(module).items() if isinstance(v, torch.Tensor))
        for key, value in tensors.items():
            if (
                value is not None
                and key not in ("packed", "weight_fp16", "panels")
                and not key.startswith("_")
            ):
                found[f"{prefix}.{key}" if prefix else key] = value
    return found
