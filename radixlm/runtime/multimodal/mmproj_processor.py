"""Idefics3's prompt processor for a GGUF pair, which has no processor directory: transformers'
``Idefics3Processor`` built from the mmproj file's image metadata and the language model's tokenizer.

The image processor takes the tower's crop size (``clip.vision.image_size``), the size images are first
resized to (``clip.vision.preproc_image_size``, the checkpoint processor's ``size.longest_edge``) and the
normalization (``clip.vision.image_mean``/``image_std``); the other settings are transformers' defaults,
which SmolVLM's processors keep (LANCZOS resampling, rescale by 1/255, padding). No key records image
splitting: it is on when the preprocessing size exceeds the crop size (SmolVLM's processors split, with
a resize size above the crop size; llama.cpp always slices Idefics3 images), off when they are equal.
"""

from __future__ import annotations

from typing import Any

from radixlm.runtime.weights.mmproj import MmprojFile
from radixlm.runtime.weights.tokenizer_files import load_tokenizer
from radixlm.runtime.weights.vision_pair import image_token_id


def idefics3_processor(mmproj_path: str, tokenizer_path: str) -> Any:
    """The ``Idefics3Processor`` for an mmproj file and the language model's tokenizer directory;
    ValueError when the tokenizer lacks an Idefics3 image token."""
    from transformers import Idefics3ImageProcessor, Idefics3Processor

    settings = MmprojFile(mmproj_path).image_settings
    tokenizer = load_tokenizer(tokenizer_path)
    if tokenizer is None:
        raise ValueError(f"{tokenizer_path}: no tokenizer to write image tokens with")
    image_token_id(tokenizer, tokenizer_path)  # the processor would add a missing one past the vocabulary
    images = Idefics3ImageProcessor(
        do_image_splitting=settings.longest_edge > settings.image_size,
        size={"longest_edge": settings.longest_edge},
        max_image_size={"longest_edge": settings.image_size},
        image_mean=list(settings.mean),
        image_std=list(settings.std),
    )
    return Idefics3Processor(
        image_processor=images, tokenizer=tokenizer, image_seq_len=settings.tokens_per_crop
    )
