"""Prompt + images -> token ids with hash-derived image pads, through the model's transformers processor
(the checkpoint's own, or for a GGUF pair the one built from its metadata: ``mmproj_processor.py``)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from radixlm.runtime.multimodal.items import ImageItem, MultimodalInputs, content_key


def open_image(data: Any) -> Any:
    """A PIL RGB image from raw bytes, a path, or a PIL image; ValueError if it is not one."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(data, Image.Image):
        return data.convert("RGB")
    try:
        if isinstance(data, (bytes, bytearray)):
            return Image.open(io.BytesIO(data)).convert("RGB")
        if isinstance(data, (str, Path)):
            return Image.open(data).convert("RGB")
    except (UnidentifiedImageError, OSError) as e:
        raise ValueError(f"not a readable image: {e}") from None
    raise ValueError(f"an image must be bytes, a path or a PIL image, not {type(data).__name__}")


class ImagePromptProcessor:
    """Wraps a transformers processor; ``image_token`` is the placeholder text a prompt carries once
    per image (the processor expands it into the image's tokens, ``image_token_id``: the same token
    for Idefics3, Gemma 3's soft tokens after its ``<start_of_image>``)."""

    def __init__(self, processor: Any) -> None:
        self.processor = processor
        self.image_token: str = self.processor.image_token
        self.image_token_id = int(self.processor.image_token_ids[0])

    @classmethod
    def from_model_dir(cls, model_dir: str) -> ImagePromptProcessor:
        """The checkpoint directory's own ``AutoProcessor``."""
        from transformers import AutoProcessor

        return cls(AutoProcessor.from_pretrained(model_dir))

    def __call__(
        self, text: str, images: list[Any], add_special_tokens: bool = True
    ) -> tuple[list[int], MultimodalInputs]:
        """``text`` with one ``image_token`` per image -> (prompt ids, its images); image tokens are
        the processor's ``image_token_id`` (``MultimodalInputs.padded`` swaps in the pads)."""
        found = text.count(self.image_token)
        if found != len(images):
            raise ValueError(f"the prompt has {found} image placeholders for {len(images)} images")
        if not images:
            return self.processor.tokenizer.encode(
                text, add_special_tokens=add_special_tokens
            ), MultimodalInputs()
        pil = [open_image(img) for img in images]
        out = self.processor(
            text=[text],
            images=[pil] if pil else None,
            return_tensors="pt",
            add_special_tokens=add_special_tokens,
        )
        ids: list[int] = out["input_ids"][0].tolist()
        positions = [i for i, t in enumerate(ids) if t == self.image_token_id]
        mm = MultimodalInputs(positions=positions)
        crops_total = int(out["pixel_values"].shape[-4])  # [crops, C, H, W], Idefics3 [1, crops, ...]
        per_crop = len(positions) // crops_total
        for img in pil:
            single = self.processor.image_processor([[img]], return_tensors="pt")
            pixels = single["pixel_values"]
            pixels = pixels[0] if pixels.dim() == 5 else pixels
            mask = single.get("pixel_attention_mask")
            mask = None if mask is None else mask[0]
            mm.items.append(
                ImageItem(content_key(pixels, mask), pixels, mask, int(pixels.shape[0]) * per_crop)
            )
        if sum(item.num_tokens for item in mm.items) != len(positions):
            raise ValueError("the processor's image tokens do not match its image crops")
        return ids, mm
