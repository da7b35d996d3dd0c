"""A llama.cpp ``mmproj`` GGUF file (``general.architecture = clip``) holding an Idefics3 / SmolVLM
vision tower and its pixel-shuffle connector, read as the vision half of the Hugging Face checkpoint.

The file is memory-mapped: F32/F16 tensors are served as views, other formats (Q8_0, ...) dequantized
one tensor at a time (the tower is small). Its metadata gives the tower's ``vision_config``, the
connector's scale factor and the image preprocessing (``ImageSettings``). Anything that would not
serve (another projector type, a missing or misshapen tensor, a truncated file) is a ValueError
naming the file and the problem, raised when the file is opened.
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
from radixlm.runtime.weights.mmproj_names import PATCH_EMBEDDING, PROJECTION, expected_shapes, mmproj_names

IDEFICS3 = "idefics3"  # clip.projector_type of llama.cpp's Idefics3 / SmolVLM projector


@dataclass(frozen=True)
class ImageSettings:
    """What Idefics3's image processor needs, from the file's ``clip.vision.*`` keys."""

    image_size: int  # the tower's input side: each crop's size
    patch_size: int
    longest_edge: int  # an image is first resized to at most this (the processor's size.longest_edge)
    mean: tuple[float, ...]
    std: tuple[float, ...]
    scale_factor: int

    @property
    def tokens_per_crop(self) -> int:
        return (self.image_size // self.patch_size) ** 2 // self.scale_factor**2


class MmprojFile:
    """An Idefics3 projector file: ``vision_config``, ``scale_factor``, ``projection_dim``,
    ``image_settings`` and its tensors under Hugging Face names (``tensors()``)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.reader = reader = open_gguf(path, arrays=True)
        arch = gguf_field(reader, "general.architecture")
        if arch != "clip":
            raise ValueError(f"{path}: not an mmproj file (general.architecture {arch!r}, expected 'clip')")
        kind = gguf_field(reader, "clip.vision.projector_type") or gguf_field(reader, "clip.projector_type")
        if kind != IDEFICS3:
            raise ValueError(
                f"{path}: projector type {kind!r} is not served; radixlm reads {IDEFICS3!r} projectors "
                "(Idefics3 / SmolVLM) only"
            )
        if not gguf_field(reader, "clip.has_vision_encoder", False):
            raise ValueError(f"{path}: the mmproj file has no vision encoder (clip.has_vision_encoder)")
        if not gguf_field(reader, "clip.use_gelu", False):
            raise ValueError(f"{path}: the tower's activation is not GELU (clip.use_gelu), as Idefics3's is")
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
        self.scale_factor = int(gguf_field(reader, "clip.vision.projector.scale_factor", 2))
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
        self.vision_config["num_channels"] = self._shape(PATCH_EMBEDDING)[1]

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
        names = mmproj_names(vision["num_hidden_layers"], swapped)
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
        patch = self._shape(PATCH_EMBEDDING)
        vision = self.vision_config
        proj_in = vision["hidden_size"] * self.scale_factor**2
        for name, shape in expected_shapes(vision, patch[1] if len(patch) == 4 else 3, proj_in).items():
            found = self._shape(name)
            if len(found) != len(shape) or any(e not in (-1, f) for e, f in zip(shape, found)):
                raise ValueError(
                    f"{self.path}: tensor {by_hf[name]!r} has shape {list(found)}; the metadata needs "
                    f"{[d if d >= 0 else 'any' for d in shape]}"
                )

    def _shape(self, hf_name: str) -> tuple[int, ...]:
        """The torch shape of a tensor (GGUF lists its axes innermost-first)."""
        return tuple(int(d) for d in reversed(self._tensors[hf_name].shape))

    @property
    def output_size(self) -> int:
        """The width of the connector's output rows (the language model's hidden size)."""
        return self._shape(PROJECTION)[0]

    def tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        """``(hf_name, float tensor)`` for the tower and the connector, one at a time."""
        for name, t in self._tensors.items():
            shape = self._shape(name)
            if t.tensor_type in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
                array = np.asarray(t.data).reshape(shape)
            else:
                array = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)
            with warnings.catch_warnings():  # read-only file pages: the loader copies them into place
                warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
                tensor = torch.from_numpy(array)
            yield name, tensor
