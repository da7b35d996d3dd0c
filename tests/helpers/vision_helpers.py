"""A tiny random Idefics3 (SmolVLM) checkpoint with its processor, and test images."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from tests.helpers.model_helpers import save_tiny_tokenizer, tiny_kwargs

IMAGE_TOKENS = ["<fake_token_around_image>", "<image>", "<global-img>", "<end_of_utterance>"]


def save_tiny_idefics3(path: str | Path, seed: int = 0) -> Path:
    """A 2-layer Llama LM + 2-layer SigLIP tower (32 px images, 8 px patches, pixel shuffle 2: 4 tokens
    per image), no image splitting; saved with an ``Idefics3Processor``."""
    from transformers import (
        AutoTokenizer,
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3ImageProcessor,
        Idefics3Processor,
    )

    path = Path(path)
    save_tiny_tokenizer(path)
    tok = AutoTokenizer.from_pretrained(str(path))
    tok.add_special_tokens({"additional_special_tokens": IMAGE_TOKENS})
    vision = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=32,
        patch_size=8,
    )
    cfg = Idefics3Config(
        text_config=dict(tiny_kwargs(), model_type="llama"),
        vision_config=vision,
        scale_factor=2,
        image_token_id=tok.convert_tokens_to_ids("<image>"),
    )
    images = Idefics3ImageProcessor(
        do_image_splitting=False, size={"longest_edge": 32}, max_image_size={"longest_edge": 32}
    )
    Idefics3Processor(image_processor=images, tokenizer=tok, image_seq_len=4).save_pretrained(str(path))
    torch.manual_seed(seed)
    model = Idefics3ForConditionalGeneration(cfg)
    with torch.no_grad():  # norms and biases away from their 1 / 0 starts, so they matter
        for name, param in model.named_parameters():
            if param.dim() == 1:
                param.normal_(1.0 if "norm" in name else 0.0, 0.2)
    model.save_pretrained(str(path))
    return path


def random_image(seed: int, size: tuple[int, int] = (40, 50)):
    """A random RGB PIL image."""
    from PIL import Image

    pixels = np.random.RandomState(seed).randint(0, 255, (*size, 3), dtype=np.uint8)
    return Image.fromarray(pixels)
