"""An ``mmproj`` GGUF writer for a tiny transformers Idefics3: the vision tower and connector laid out as
llama.cpp's ``convert_hf_to_gguf.py --mmproj`` writes them (``MmprojModel`` + ``SmolVLMModel``).

Tensor names come from gguf-py's own ``TensorNameMap`` for ``MODEL_ARCH.MMPROJ`` (llama.cpp's table,
not ours); keys are written with gguf-py's ``add_clip_*`` / ``add_vision_*`` methods. As the converter
does, embeddings and 1-D tensors stay F32 and other weights take ``weight_type``; nothing is permuted.
Knobs for bad files: another projector type, dropped tensors, fc1/fc2 under each other's names (older
conversions).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch


def save_tiny_mmproj(
    config,
    state_dict: dict[str, torch.Tensor],
    image_processor,
    path: str | Path,
    weight_type: str = "F32",
    projector_type: str = "idefics3",
    drop: tuple[str, ...] = (),
    ffn_swapped: bool = False,
) -> Path:
    """Write the vision half of an ``Idefics3ForConditionalGeneration`` (``config``, ``state_dict``)
    with its ``image_processor``'s mean, std and size to ``path``; ``drop``: GGUF names left out."""
    import gguf

    vision = config.vision_config
    proj = state_dict["model.connector.modality_projection.proj.weight"]
    writer = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.MMPROJ])
    writer.add_type(gguf.GGUFType.MMPROJ)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_clip_has_vision_encoder(True)
    writer.add_vision_projection_dim(int(proj.shape[0]))
    writer.add_vision_image_size(vision.image_size)
    writer.add_vision_patch_size(vision.patch_size)
    writer.add_vision_embedding_length(vision.hidden_size)
    writer.add_vision_feed_forward_length(vision.intermediate_size)
    writer.add_vision_block_count(vision.num_hidden_layers)
    writer.add_vision_head_count(vision.num_attention_heads)
    writer.add_vision_image_mean(list(image_processor.image_mean))
    writer.add_vision_image_std(list(image_processor.image_std))
    writer.add_clip_projector_type(projector_type)
    writer.add_vision_attention_layernorm_eps(vision.layer_norm_eps)
    writer.add_vision_projector_scale_factor(config.scale_factor)
    writer.add_vision_use_gelu(True)
    writer.add_vision_preproc_image_size(int(image_processor.size["longest_edge"]))

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.MMPROJ, vision.num_hidden_layers)
    for name, tensor in state_dict.items():
        if not name.startswith(("model.vision_model.", "model.connector.")):
            continue
        gguf_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
        assert gguf_name is not None, f"llama.cpp has no name for {name}"
        if ffn_swapped:
            gguf_name = _swap_ffn(gguf_name)
        if gguf_name in drop:
            continue
        array = np.ascontiguousarray(tensor.float().numpy())
        if ".embeddings." in name or array.ndim == 1 or weight_type == "F32":
            writer.add_tensor(gguf_name, array)
        elif weight_type == "F16":
            writer.add_tensor(gguf_name, array.astype(np.float16))
        else:
            qtype = gguf.GGMLQuantizationType[weight_type]
            writer.add_tensor(gguf_name, gguf.quants.quantize(array, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(path)


def _swap_ffn(name: str) -> str:
    if ".ffn_up." in name:
        return name.replace(".ffn_up.", ".ffn_down.")
    return name.replace(".ffn_down.", ".ffn_up.")


def roundtrip(state_dict: dict[str, torch.Tensor], weight_type: str) -> dict[str, torch.Tensor]:
    """The tower weights as a ``weight_type`` file stores them (what serving it must reproduce)."""
    import gguf

    out = dict(state_dict)
    for name, tensor in state_dict.items():
        if not name.startswith(("model.vision_model.", "model.connector.")) or tensor.dim() == 1:
            continue
        if ".embeddings." in name:
            continue
        array = tensor.float().numpy()
        if weight_type == "F16":
            out[name] = torch.from_numpy(array.astype(np.float16).astype(np.float32))
        else:
            qtype = gguf.GGMLQuantizationType[weight_type]
            data = gguf.quants.dequantize(gguf.quants.quantize(array, qtype), qtype)
            out[name] = torch.from_numpy(np.ascontiguousarray(data, dtype=np.float32))
    return out
