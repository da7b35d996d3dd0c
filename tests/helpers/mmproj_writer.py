"""An ``mmproj`` GGUF writer for a tiny transformers Idefics3 or Gemma 3 vision-language model: the
vision tower and projector laid out as llama.cpp's ``convert_hf_to_gguf.py --mmproj`` writes them
(``MmprojModel`` + ``SmolVLMModel`` / ``Gemma3VisionModel``).

Tensor names come from gguf-py's own ``TensorNameMap`` for ``MODEL_ARCH.MMPROJ`` (llama.cpp's table,
not ours), fed the original checkpoint's names (Gemma 3's as google's release names them,
``vision_tower.vision_model.*`` and ``multi_modal_projector.*``, with ``_weight`` written ``.weight``
as the converter does); keys are written with gguf-py's ``add_clip_*`` / ``add_vision_*`` methods.
As the converter does, embeddings and 1-D tensors stay F32, Gemma 3's input projection is F16 and
other weights take ``weight_type``; nothing is permuted or transposed; Gemma 3's ``soft_emb_norm`` is
stored as ``1 + w``. Knobs for bad files: another projector type, dropped tensors, fc1/fc2 under each
other's names (older conversions).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

# what a family's vision half is written from: its HF tensor prefixes and projector type
_FAMILY = {
    "idefics3": (("model.vision_model.", "model.connector."), "idefics3"),
    "gemma3": (("model.vision_tower.", "model.multi_modal_projector."), "gemma3"),
}


def save_tiny_mmproj(
    config,
    state_dict: dict[str, torch.Tensor],
    image_processor,
    path: str | Path,
    weight_type: str = "F32",
    projector_type: str | None = None,
    drop: tuple[str, ...] = (),
    ffn_swapped: bool = False,
) -> Path:
    """Write the vision half of an ``Idefics3ForConditionalGeneration`` or a
    ``Gemma3ForConditionalGeneration`` (``config``, ``state_dict``) with its ``image_processor``'s
    mean, std and size to ``path``; ``drop``: GGUF names left out."""
    import gguf

    vision = config.vision_config
    prefixes, default_type = _FAMILY[config.model_type]
    writer = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.MMPROJ])
    writer.add_type(gguf.GGUFType.MMPROJ)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_clip_has_vision_encoder(True)
    writer.add_vision_projection_dim(config.text_config.hidden_size)
    writer.add_vision_image_size(vision.image_size)
    writer.add_vision_patch_size(vision.patch_size)
    writer.add_vision_embedding_length(vision.hidden_size)
    writer.add_vision_feed_forward_length(vision.intermediate_size)
    writer.add_vision_block_count(vision.num_hidden_layers)
    writer.add_vision_head_count(vision.num_attention_heads)
    writer.add_vision_image_mean(list(image_processor.image_mean))
    writer.add_vision_image_std(list(image_processor.image_std))
    writer.add_clip_projector_type(projector_type or default_type)
    writer.add_vision_attention_layernorm_eps(vision.layer_norm_eps)
    writer.add_vision_use_gelu(True)
    if config.model_type == "idefics3":
        writer.add_vision_projector_scale_factor(config.scale_factor)
        writer.add_vision_preproc_image_size(int(image_processor.size["longest_edge"]))
    else:  # Gemma3VisionModel writes the pooling only where it is not clip.cpp's default of 4
        pool = (vision.image_size // vision.patch_size) // int(config.mm_tokens_per_image**0.5)
        if pool != 4:
            writer.add_vision_projector_scale_factor(pool)

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.MMPROJ, vision.num_hidden_layers)
    for name, tensor in state_dict.items():
        if not name.startswith(prefixes):
            continue
        array = np.ascontiguousarray(tensor.float().numpy())
        if config.model_type == "gemma3":
            # the original release's names (transformers 5 saves the tower without vision_model.)
            name = name.removeprefix("model.").replace("_weight", ".weight")
            if name.startswith("vision_tower.") and not name.startswith("vision_tower.vision_model."):
                name = name.replace("vision_tower.", "vision_tower.vision_model.", 1)
            if name.endswith("soft_emb_norm.weight"):
                array = array + 1.0  # Gemma3RMSNorm's 1 + w, as the converter stores it
        gguf_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
        assert gguf_name is not None, f"llama.cpp has no name for {name}"
        if ffn_swapped:
            gguf_name = _swap_ffn(gguf_name)
        if gguf_name in drop:
            continue
        if "input_projection" in name:  # the converter forces F16 (llama.cpp issue 13025)
            writer.add_tensor(gguf_name, array.astype(np.float16))
        elif ".embeddings." in name or array.ndim == 1 or weight_type == "F32":
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
    prefixes = _FAMILY["idefics3"][0] + _FAMILY["gemma3"][0]
    for name, tensor in state_dict.items():
        if not name.startswith(prefixes) or tensor.dim() == 1:
            continue
        if ".embeddings." in name or "input_projection" in name:
            continue
        array = tensor.float().numpy()
        if weight_type == "F16":
            out[name] = torch.from_numpy(array.astype(np.float16).astype(np.float32))
        else:
            qtype = gguf.GGMLQuantizationType[weight_type]
            data = gguf.quants.dequantize(gguf.quants.quantize(array, qtype), qtype)
            out[name] = torch.from_numpy(np.ascontiguousarray(data, dtype=np.float32))
    return out
