"""llama.cpp's tensor names for the SigLIP tower of an ``mmproj`` file and the Hugging Face names they
came from, with the shape each must have (the projectors' own tensors: ``mmproj_projectors.py``).

The names are gguf-py's ``MODEL_TENSOR.V_*`` as its ``TensorNameMap`` writes them for the checkpoints
``convert_hf_to_gguf.py --mmproj`` converts (Idefics3's ``model.vision_model.*``, Gemma 3's
``vision_tower.vision_model.*``), which ``tools/mtmd/clip.cpp`` reads back. The converter renames the
tower's tensors only: none is permuted or transposed (the patch embedding's ``[hidden, channels,
patch, patch]`` is stored as is; GGUF lists the same axes innermost-first, the order ggml's
``conv_2d`` kernel takes).
"""

from __future__ import annotations

# per tower layer: llama.cpp's v.blk.{i}.<name> -> the HF module under encoder.layers.{i}
_LAYER = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_out": "self_attn.out_proj",
    "ln1": "layer_norm1",
    "ln2": "layer_norm2",
    "ffn_up": "mlp.fc1",
    "ffn_down": "mlp.fc2",
}


def patch_embedding(prefix: str) -> str:
    """The HF name of the patch embedding of the tower under ``prefix``."""
    return prefix + "embeddings.patch_embedding.weight"


def tower_names(prefix: str, layers: int, ffn_swapped: bool = False) -> dict[str, str]:
    """llama.cpp name -> HF checkpoint name (under ``prefix``, e.g. ``model.vision_model.``) for every
    tower tensor a projector file must hold.

    ``ffn_swapped``: the file names the tower's fc1 ``ffn_down`` and fc2 ``ffn_up`` (older llama.cpp
    conversions; clip.cpp swaps them back when ``ffn_down``'s input width is the hidden size)."""
    names = {
        "v.patch_embd.weight": patch_embedding(prefix),
        "v.patch_embd.bias": prefix + "embeddings.patch_embedding.bias",
        "v.position_embd.weight": prefix + "embeddings.position_embedding.weight",
        "v.post_ln.weight": prefix + "post_layernorm.weight",
        "v.post_ln.bias": prefix + "post_layernorm.bias",
    }
    layer_names = dict(_LAYER)
    if ffn_swapped:
        layer_names["ffn_up"], layer_names["ffn_down"] = _LAYER["ffn_down"], _LAYER["ffn_up"]
    for i in range(layers):
        for ours, theirs in layer_names.items():
            for leaf in ("weight", "bias"):
                names[f"v.blk.{i}.{ours}.{leaf}"] = f"{prefix}encoder.layers.{i}.{theirs}.{leaf}"
    return names


def tower_shapes(prefix: str, vision: dict[str, int], channels: int) -> dict[str, tuple[int, ...]]:
    """HF name -> torch shape of every tower tensor. ``vision``: the HF ``vision_config`` fields."""
    hidden, inter, patch = vision["hidden_size"], vision["intermediate_size"], vision["patch_size"]
    positions = (vision["image_size"] // patch) ** 2
    shapes: dict[str, tuple[int, ...]] = {
        patch_embedding(prefix): (hidden, channels, patch, patch),
        prefix + "embeddings.patch_embedding.bias": (hidden,),
        prefix + "embeddings.position_embedding.weight": (positions, hidden),
        prefix + "post_layernorm.weight": (hidden,),
        prefix + "post_layernorm.bias": (hidden,),
    }
    per_layer = {
        "self_attn.q_proj": (hidden, hidden),
        "self_attn.k_proj": (hidden, hidden),
        "self_attn.v_proj": (hidden, hidden),
        "self_attn.out_proj": (hidden, hidden),
        "layer_norm1": (hidden,),
        "layer_norm2": (hidden,),
        "mlp.fc1": (inter, hidden),
        "mlp.fc2": (hidden, inter),
    }
    for i in range(vision["num_hidden_layers"]):
        for module, shape in per_layer.items():
            name = f"{prefix}encoder.layers.{i}.{module}"
            shapes[name + ".weight"] = shape
            shapes[name + ".bias"] = shape[:1]
    return shapes
