"""A llama.cpp ``mmproj`` GGUF file (``general.architecture = clip``) holding a SigLIP vision tower
and its projector (Idefics3 / SmolVLM's or Gemma 3's: ``mmproj_projectors.py``), read as the vision
half of the Hugging Face checkpoint.

The file is memory-mapped: F32/F16 tensors are served as views, other formats (Q8_0, ...) dequantized
one tensor at a time (the tower is small); what the converter added to a tensor (Gemma 3's norm) is
taken off. Its metadata gives the tower's ``vision_config``, the projector's scale factor and the
image preprocessing (``ImageSettings``). Anything that would not serve (another projector type, a
missing or misshapen tensor, a truncated file) is a ValueError naming the file and the problem, raised
when the file is opened.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from gguf import GGMLQuantizationType, ReaderTensor
from gguf.quants import dequantize

from radixlm.runtime.weights.gguf_config import gguf_field
from radixlm.runtime.weights.gguf_source import READABLE_TYPES, open_gguf
from radixlm.runtime.weights.mmproj_names import patch_embedding, tower_names, tower_shapes
from radixlm.runtime.weights.mmproj_projectors import PROJECTORS


@dataclass(frozen=True)
class ImageSettings:
    """What the image processor needs, from the file's ``clip.vision.*`` keys."""

    image_size: int  # the tower's input side: each crop's size
    patch_size: int
    longest_edge: int  # Idefics3: an image is first resized to at most this (size.longest_edge)
    mean: tuple[float, ...]
    std: tuple[float, ...]
    scale_factor: int

    @property
    def tokens_per_crop(self) -> int:
        """Image tokens per crop: the patch grid shrunk by the scale factor per side (Idefics3's pixel
        shuffle, Gemma 3's pooling; Gemma 3's ``mm_tokens_per_image``)."""
        return (self.image_size // self.patch_size) ** 2 // self.scale_factor**2


class MmprojFile:
    """A projector file: its ``projector`` type, ``vision_config``, ``scale_factor``,
    ``projection_dim``, ``image_settings`` and its tensors under Hugging Face names (``tensors()``)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.reader = reader = open_gguf(path, arrays=True)
        arch = gguf_field(reader, "general.architecture")
        if arch != "clip":
            raise ValueError(f"{path}: not an mmproj file (general.architecture {arch!r}, expected 'clip')")
        kind = gguf_field(reader, "clip.vision.projector_type") or gguf_field(reader, "clip.projector_type")
        if kind not in PROJECTORS:
            raise ValueError(
                f"{path}: projector type {kind!r} is not served; radixlm reads "
                f"{', '.join(repr(k) for k in PROJECTORS)} projectors (Idefics3 / SmolVLM, Gemma 3)"
            )
        self.projector = PROJECTORS[kind]
        if not gguf_field(reader, "clip.has_vision_encoder", False):
            raise ValueError(f"{path}: the mmproj file has no vision encoder (clip.has_vision_encoder)")
        if not gguf_field(reader, "clip.use_gelu", False):
            raise ValueError(f"{path}: the tower's activation is not GELU (clip.use_gelu), as SigLIP's is")
        self.vision_config = {
            "hidden_size": self._int("clip.vision.embedding_length"),
            "intermediate_size": self._int("clip.vision.feed_forward_length"),
            "num_hidden_layers": self._int("clip.vision.block_count"),
            "num_attention_heads": self._int("clip.vision.attention.head_count"),
            "image_size": self._int("clip.vision.image_size"),
            "patch_size": self._int("clip.vision.patch_size"),
            "layer_norm_eps": float(self._required("clip.vision.attention.layer_norm_epsilon")),
            "hidden_act": "gelu_pytorch_tanh",  # ggml_gelu is the tanh approximation
        }
        self.scale_factor = int(
            gguf_field(reader, "clip.vision.projector.scale_factor", self.projector.default_scale_factor)
        )
        self.projection_dim = gguf_field(reader, "clip.vision.projection_dim")
        self.image_settings = ImageSettings(
            image_size=self.vision_config["image_size"],
            patch_size=self.vision_config["patch_size"],
            longest_edge=int(
                gguf_field(reader, "clip.vision.preproc_image_size", self.vision_config["image_size"])
            ),
            mean=tuple(float(v) for v in self._required("clip.vision.image_mean")),
            std=tuple(float(v) for v in self._required("clip.vision.image_std")),
            scale_factor=self.scale_factor,
        )
        by_name = {t.name: t for t in reader.tensors}
        self._names = self._tensor_names(by_name)
        self._tensors = {hf: by_name[gguf_name] for gguf_name, hf in self._names.items()}
        self._check_tensors()
        self.vision_config["num_channels"] = self._shape(self._patch_embedding)[1]

    def _required(self, key: str) -> Any:
        value = gguf_field(self.reader, key)
        if value is None or (isinstance(value, list) and not value):
            raise ValueError(f"{self.path}: the mmproj file has no {key}")
        return value

    def _int(self, key: str) -> int:
        return int(self._required(key))

    def _tensor_names(self, by_name: dict[str, ReaderTensor]) -> dict[str, str]:
        """llama.cpp name -> HF name, ``ffn_up``/``ffn_down`` read as clip.cpp reads them: swapped
        when ``ffn_down``'s input width is the hidden size (older conversions named them the other way
        round; a tower whose two widths are equal is taken as named)."""
        vision = self.vision_config
        hidden, inter = vision["hidden_size"], vision["intermediate_size"]
        down = by_name.get("v.blk.0.ffn_down.weight")
        swapped = down is not None and hidden != inter and int(down.shape[0]) == hidden
        names = tower_names(self.projector.tower_prefix, vision["num_hidden_layers"], swapped)
        names.update(self.projector.tensors)
        missing = [name for name in names if name not in by_name]
        if missing:
            raise ValueError(f"{self.path}: the mmproj file has no tensor {missing[0]!r}")
        return names

    def _check_tensors(self) -> None:
        """ValueError naming the first tensor in a format no path reads or of a shape the metadata
        does not give."""
        by_hf = {hf: gguf_name for gguf_name, hf in self._names.items()}
        for name, t in self._tensors.items():
            if t.tensor_type not in READABLE_TYPES:
                raise ValueError(
                    f"{self.path}: tensor {by_hf[name]!r} is stored as {t.tensor_type.name}, which no "
                    "path reads"
                )
        patch = self._shape(self._patch_embedding)
        vision = self.vision_config
        shapes = tower_shapes(self.projector.tower_prefix, vision, patch[1] if len(patch) == 4 else 3)
        shapes.update(self.projector.shapes(vision["hidden_size"], self.scale_factor))
        for name, shape in shapes.items():
            found = self._shape(name)
            if len(found) != len(shape) or any(e not in (-1, f) for e, f in zip(shape, found)):
                raise ValueError(
                    f"{self.path}: tensor {by_hf[name]!r} has shape {list(found)}; the metadata needs "
                    f"{[d if d >= 0 else 'any' for d in shape]}"
                )

    @property
    def _patch_embedding(self) -> str:
        return patch_embedding(self.projector.tower_prefix)

    def _shape(self, hf_name: str) -> tuple[int, ...]:
        """The torch shape of a tensor (GGUF lists its axes innermost-first)."""
        return tuple(int(d) for d in reversed(self._tensors[hf_name].shape))

    @property
    def output_size(self) -> int:
        """The width of the projector's output rows (the language model's hidden size)."""
        return self._shape(self.projector.projection)[self.projector.projection_out_axis]

    def tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        """``(hf_name, float tensor)`` for the tower and the projector, one at a time."""
        offsets = self.projector.stored_offsets
        for name, t in self._tensors.items():
            shape = self._shape(name)
            if t.tensor_type in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
                array = np.asarray(t.data).reshape(shape)
            else:
                array = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)
            with warnings.catch_warnings():  # read-only file pages: the loader copies them into place
                warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
                tensor = torch.from_numpy(array)
            if name in offsets:  # in fp32, as the model adds it back (Gemma's 1 + w)
                tensor = tensor.float() - offsets[name]
            yield name, tensor
