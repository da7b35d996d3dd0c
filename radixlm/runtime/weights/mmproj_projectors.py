"""The projector types radixlm serves from a llama.cpp ``mmproj`` file (``clip.projector_type``): the
language model each needs, where its tower sits in the Hugging Face checkpoint, and its own tensors.

- ``idefics3`` (Idefics3 / SmolVLM, the converter's class SmolVLMModel): the pixel-shuffle connector,
  one linear ``mm.model.fc.weight`` ``[text, vision * scale^2]``, stored as is.
- ``gemma3`` (Gemma 3 4B-27B, class Gemma3VisionModel): ``mm.input_projection.weight``, transformers'
  ``mm_input_projection_weight`` ``[vision, text]`` (a matrix the image rows multiply from the left,
  stored untransposed: clip.cpp transposes it in its graph), and ``mm.soft_emb_norm.weight``, Gemma's
  RMSNorm scale, stored by the converter as ``1 + w`` like the text norms (the tower's LayerNorms are
  not shifted). The patch grid is average-pooled by ``clip.vision.projector.scale_factor`` per side,
  4 when the key is absent (clip.cpp's default; the converter writes it only when it differs).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

Shapes = Callable[[int, int], dict[str, tuple[int, ...]]]


@dataclass(frozen=True)
class Projector:
    """One projector type's layout (tensor names are llama.cpp's -> the HF checkpoint's)."""

    kind: str  # clip.projector_type
    language_model: str  # the HF architecture the language model GGUF must translate to
    architecture: str  # the vision-language model the pair is served as
    tower_prefix: str  # the tower's tensors in the HF checkpoint
    projection: str  # HF name of the matrix whose output width is the language model's
    projection_out_axis: int  # that width's torch axis
    tensors: dict[str, str]  # the projector's own tensors
    # (tower width, scale factor) -> HF name -> torch shape (-1: the language model's width, checked
    # against it separately)
    shapes: Shapes
    default_scale_factor: int
    stored_offsets: dict[str, float] = field(default_factory=dict)  # HF name -> what the converter added


_FC = "model.connector.modality_projection.proj.weight"
_INPUT_PROJECTION = "model.multi_modal_projector.mm_input_projection_weight"
_SOFT_EMB_NORM = "model.multi_modal_projector.mm_soft_emb_norm.weight"

IDEFICS3 = Projector(
    kind="idefics3",
    language_model="LlamaForCausalLM",
    architecture="Idefics3ForConditionalGeneration",
    tower_prefix="model.vision_model.",
    projection=_FC,
    projection_out_axis=0,
    tensors={"mm.model.fc.weight": _FC},
    shapes=lambda hidden, scale: {_FC: (-1, hidden * scale**2)},
    default_scale_factor=2,
)

GEMMA3 = Projector(
    kind="gemma3",
    language_model="Gemma3ForCausalLM",
    architecture="Gemma3ForConditionalGeneration",
    tower_prefix="model.vision_tower.vision_model.",
    projection=_INPUT_PROJECTION,
    projection_out_axis=1,
    tensors={"mm.input_projection.weight": _INPUT_PROJECTION, "mm.soft_emb_norm.weight": _SOFT_EMB_NORM},
    shapes=lambda hidden, scale: {_INPUT_PROJECTION: (hidden, -1), _SOFT_EMB_NORM: (hidden,)},
    default_scale_factor=4,
    stored_offsets={_SOFT_EMB_NORM: 1.0},
)

PROJECTORS = {p.kind: p for p in (IDEFICS3, GEMMA3)}
