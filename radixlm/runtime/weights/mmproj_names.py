"""llama.cpp's tensor names in an Idefics3 / SmolVLM ``mmproj`` file and the Hugging Face names they
came from, with the shape each must have.

The names are gguf-py's ``MODEL_TENSOR.V_*`` / ``V_MMPROJ_FC`` as its ``TensorNameMap`` writes them for
``Idefics3ForConditionalGeneration`` (``convert_hf_to_gguf.py --mmproj``, class ``SmolVLMModel``), which
``tools/mtmd/clip.cpp`` reads back. The converter renames only: no tensor is permuted or transposed
(the patch embedding's ``[hidden, channels, patch, patch]`` is stored as is; GGUF lists the same axes
innermost-first, the order ggml's ``conv_2d`` kernel takes).
"""

from __future__ import annotations

VISION = "model.vision_model."
PATCH_EMBEDDING = VISION + "embeddings.patch_embedding.weight"
PROJECTION = "model.connector.modality_projection.proj.weight"

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


def mmproj_names(layers: int, ffn_swapped: bool = False) -> dict[str, str]:
    """llama.cpp name -> HF checkpoint name for every tensor an Idefics3 projector file must hold.

    ``ffn_swapped``: the file names the tower's fc1 ``ffn_down`` and fc2 ``ffn_up`` (older llama.cpp
    conversions; clip.cpp swaps them back when ``ffn_down``'s input width is the hidden size)."""
    names = {
        "v.patch_embd.weight": PATCH_EMBEDDING,
        "v.patch_embd.bias": VISION + "embeddings.patch_embedding.bias",
        "v.position_embd.weight": VISION + "embeddings.position_embedding.weight",
        "v.post_ln.weight": VISION + "post_layernorm.weight",
        "v.post_ln.bias": VISION + "post_layernorm.bias",
        "mm.model.fc.weight": PROJECTION,
    }
    layer_names = dict(_LAYER)
    if ffn_swapped:
        layer_names["ffn_up"], layer_names["ffn_down"] = _LAYER["ffn_down"], _LAYER["ffn_up"]
    for i in range(layers):
        for ours, theirs in layer_names.items():
            for leaf in ("weight", "bias"):
                names[f"v.blk.{i}.{ours}.{leaf}"] = f"{VISION}encoder.layers.{i}.{theirs}.{leaf}"
    return names


def expected_shapes(vision: dict[str, int], channels: int, proj_in: int) -> dict[str, tuple[int, ...]]:
    """HF name -> torch shape of every tower tensor (the projection's output width is the language
    model's, checked against it separately). ``vision``: the HF ``vision_config`` fields."""
    hidden, inter, patch = vision["hidden_size"], vision["intermediate_size"], vision["patch_size"]
    positions = (vision["image_size"] // patch) ** 2
    shapes: dict[str, tuple[int, ...]] = {
        PATCH_EMBEDDING: (hidden, channels, patch, patch),
        VISION + "embeddings.patch_embedding.bias": (hidden,),
        VISION + "embeddings.position_embedding.weight": (positions, hidden),
        VISION + "post_layernorm.weight": (hidden,),
        VISION + "post_layernorm.bias": (hidden,),
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
            prefix = f"{VISION}encoder.layers.{i}.{module}"
            shapes[prefix + ".weight"] = shape
            shapes[prefix + ".bias"] = shape[:1]
    shapes[PROJECTION] = (-1, proj_in)  # -1: any output width here
    return shapes
