"""The prompt processor of a GGUF pair, which has no processor directory: transformers' processor of
the projector's family built from the mmproj file's image metadata and the language model's tokenizer.

Idefics3 (``Idefics3Processor``): the image processor takes the tower's crop size
(``clip.vision.image_size``), the size images are first resized to (``clip.vision.preproc_image_size``,
the checkpoint processor's ``size.longest_edge``) and the normalization
(``clip.vision.image_mean``/``image_std``); the other settings are transformers' defaults, which
SmolVLM's processors keep (LANCZOS resampling, rescale by 1/255, padding). No key records image
splitting: it is on when the preprocessing size exceeds the crop size (SmolVLM's processors split, with
a resize size above the crop size; llama.cpp always slices Idefics3 images), off when they are equal.

Gemma 3 (``Gemma3Processor``): a plain resize to the tower's square (bilinear, as Gemma 3's processor
and llama.cpp), rescale by 1/255 and the file's normalization; no pan-and-scan crops. Each image is
``<start_of_image>``, ``mm_tokens_per_image`` soft tokens and ``<end_of_image>``.
"""

from __future__ import annotations

from typing import Any

from radixlm.runtime.weights.mmproj import ImageSettings, MmprojFile
from radixlm.runtime.weights.tokenizer_files import load_tokenizer
from radixlm.runtime.weights.vision_pair import IMAGE_TOKENS, image_token_ids


def mmproj_processor(mmproj_path: str, tokenizer_path: str) -> Any:
    """The transformers processor for an mmproj file and the language model's tokenizer directory;
    ValueError when the tokenizer lacks an image token of the projector's family."""
    mmproj = MmprojFile(mmproj_path)
    kind = mmproj.projector.kind
    tokenizer = load_tokenizer(tokenizer_path)
    if tokenizer is None:
        raise ValueError(f"{tokenizer_path}: no tokenizer to write image tokens with")
    # checked first: the processor would add a missing one past the vocabulary
    image_token_ids(tokenizer, kind, tokenizer_path)
    if kind == "gemma3":
        return _gemma3_processor(mmproj.image_settings, tokenizer_path)
    return _idefics3_processor(mmproj.image_settings, tokenizer)


def _idefics3_processor(settings: ImageSettings, tokenizer: Any) -> Any:
    from transformers import Idefics3ImageProcessor, Idefics3Processor

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


def _gemma3_processor(settings: ImageSettings, tokenizer_path: str) -> Any:
    from transformers import AutoTokenizer, Gemma3ImageProcessor, Gemma3Processor

    boi, soft, eoi = IMAGE_TOKENS["gemma3"]
    # Gemma3Processor reads these three from the tokenizer's named special tokens
    tokenizer = AutoTokenizer.from_pretrained(
        tokenizer_path, extra_special_tokens={"boi_token": boi, "image_token": soft, "eoi_token": eoi}
    )
    images = Gemma3ImageProcessor(
        size={"height": settings.image_size, "width": settings.image_size},
        image_mean=list(settings.mean),
        image_std=list(settings.std),
        do_pan_and_scan=False,
    )
    return Gemma3Processor(
        image_processor=images, tokenizer=tokenizer, image_seq_length=settings.tokens_per_crop
    )
